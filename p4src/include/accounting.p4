// Accounting: per-job event counters and drop counters, readable over
// P4Runtime.  Event codes and indices come from esa/spec.py.
#ifndef ESA_ACCOUNTING_P4
#define ESA_ACCOUNTING_P4

control Accounting(in esa_h esa, in job_t job, in outcome_t outcome) {
    counter(COUNTER_SIZE, CounterType.packets) job_events;
    counter(DROP_REASONS, CounterType.packets) drops;

    apply {
        bit<32> base = (bit<32>)job * EVENTS_PER_JOB;
        if (outcome.ev1 != event_t.NONE) {
            job_events.count(base + (bit<32>)outcome.ev1);
        }
        if (outcome.ev2 != event_t.NONE) {
            job_events.count(base + (bit<32>)outcome.ev2);
        }
        if (outcome.victim_ev != event_t.NONE) {
            job_events.count((bit<32>)outcome.victim_job * EVENTS_PER_JOB + (bit<32>)outcome.victim_ev);
        }
        if (outcome.sum_out && (esa.flags & FLAG_OVERFLOW) != 0) {
            job_events.count((bit<32>)esa.job * EVENTS_PER_JOB + (bit<32>)event_t.OVERFLOW);
        }
        if (outcome.drop_reason != drop_t.NONE) {
            drops.count((bit<32>)outcome.drop_reason);
        }
    }
}

#endif
