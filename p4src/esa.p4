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
        if (hdr.esa.isValid()) {
            admission.apply(hdr, meta, std);
            if (meta.to_pool == 1) {
                pool.apply(hdr, meta, std);
            }
        }
        forwarding.apply(hdr, meta, std);
        if (hdr.esa.isValid()) {
            accounting.apply(hdr, meta);
        }
    }
}

control EsaEgress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t std) {
    ReplicaRewrite() rewrite;

    apply {
        rewrite.apply(hdr, meta, std);
    }
}

V1Switch(EsaParser(), NoVerify(), EsaIngress(), EsaEgress(), Ipv4Checksum(),
         EsaDeparser()) main;
