// Benchmark reference: the ESA parser and K, a hash to a slot and a
// read-add-write of the K value lanes, nothing else.  Like an aggregation of
// two workers it emits one frame per two: worker 1's go to port 2, worker
// 0's are dropped, so it deparses as many frames as ESA does.
#include <core.p4>
#include <v1model.p4>

#include "../include/headers.p4"
#include "../include/parser.p4"
#include "../include/lanes.p4"

// The lane macros name the slot as `slot` and the values as `vals`, as in
// SlotPool.
control Lanes(in esa_values_h vals, in slot_meta_t slot) {
    ESA_LANE_REGISTERS

    action lanes_add() { value_t t; ESA_FOR_EACH_LANE(LANE_ADD) }

    apply { lanes_add(); }
}

control SumIngress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t std) {
    Lanes() lanes;

    apply {
        if (hdr.vals.isValid()) {
            hash(meta.slot.idx, HashAlgorithm.crc32, (slot_idx_t)0, { hdr.esa.job, hdr.esa.seq },
                 (bit<32>)POOL_SIZE);
            lanes.apply(hdr.vals, meta.slot);
        }
        if (hdr.esa.bitmap == 1) {
            mark_to_drop(std);
        } else {
            std.egress_spec = 2;
        }
    }
}

control NoEgress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t std) {
    apply { }
}

V1Switch(EsaParser(), NoVerify(), SumIngress(), NoEgress(), Ipv4Checksum(),
         EsaDeparser()) main;
