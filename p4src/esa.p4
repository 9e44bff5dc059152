// ESA: preemptive, priority-scheduled in-network aggregation for BMv2 (v1model).
//
// Jobs share a pool of aggregator slots.  A contribution claims its chunk's
// slot, adds into it, or (ESA policy) preempts a lower-priority holder; a
// slot is released the moment its sum completes.  ATP-style sharing and
// static partitions (SwitchML-style) are selectable at run time.  The rules
// are listed in docs/dataplane.md and stated executably in esa/model.py.
#include <core.p4>
#include <v1model.p4>

#include "include/headers.p4"
#include "include/parser.p4"
#include "include/lanes.p4"
#include "include/admission.p4"
#include "include/slot_pool.p4"
#include "include/forwarding.p4"
#include "include/accounting.p4"
#include "include/replicas.p4"

control EsaIngress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t std) {
    Admission() admission;
    SlotPool() pool;
    Forwarding() forwarding;
    Accounting() accounting;

    apply {
        if (std.parser_error != error.NoError) {
            // A0: a frame too short for the headers it announces.
            meta.outcome.drop_reason = drop_t.MALFORMED;
            mark_to_drop(std);
            accounting.apply(hdr.esa, meta.job.id, meta.outcome);
            return;
        }
        if (hdr.esa.isValid()) {
            admission.apply(hdr.esa, std.ingress_port, meta.job, meta.slot, meta.outcome);
            if (meta.slot.to_pool) {
                pool.apply(hdr.esa, hdr.vals, meta.job, meta.slot, meta.outcome,
                           std.ingress_global_timestamp);
            }
        }
        forwarding.apply(hdr.ethernet, hdr.ipv4, hdr.udp, hdr.esa, meta.job, meta.outcome, std);
        if (hdr.esa.isValid()) {
            accounting.apply(hdr.esa, meta.job.id, meta.outcome);
        }
    }
}

control EsaEgress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t std) {
    ReplicaRewrite() rewrite;

    apply {
        rewrite.apply(hdr.ethernet, hdr.ipv4, hdr.udp, hdr.esa, meta.outcome, std);
    }
}

V1Switch(EsaParser(), NoVerify(), EsaIngress(), EsaEgress(), Ipv4Checksum(),
         EsaDeparser()) main;
