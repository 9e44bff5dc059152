// Accounting: per-job event counters and drop counters, readable over
// P4Runtime.  Event codes and indices come from esa/spec.py.
#ifndef ESA_ACCOUNTING_P4
#define ESA_ACCOUNTING_P4

control Accounting(in headers_t hdr, in metadata_t meta) {
    counter(COUNTER_SIZE, CounterType.packets) job_events;
    counter(DROP_REASONS, CounterType.packets) drops;

    apply {
        bit<32> base = (bit<32>)meta.job * EVENTS_PER_JOB;
        if (meta.ev1 != EV_NONE) {
            job_events.count(base + meta.ev1);
        }
        if (meta.ev2 != EV_NONE) {
            job_events.count(base + meta.ev2);
        }
        if (meta.victim_ev != EV_NONE) {
            job_events.count((bit<32>)meta.victim_job * EVENTS_PER_JOB + meta.victim_ev);
        }
        if (meta.sum_out == 1 && (hdr.esa.flags & FLAG_OVERFLOW) != 0) {
            job_events.count((bit<32>)hdr.esa.job * EVENTS_PER_JOB + EV_OVERFLOW);
        }
        if (meta.drop_reason != DROP_NONE) {
            drops.count(meta.drop_reason);
        }
    }
}

#endif
