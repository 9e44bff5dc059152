// Benchmark reference: Ethernet-only parse, every frame from port 1 to port 2.
#include <core.p4>
#include <v1model.p4>

#include "../include/headers.p4"

parser EthParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t std) {
    state start {
        pkt.extract(hdr.ethernet);
        transition accept;
    }
}

control EthDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.ethernet); }
}

control Pass(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control FwdIngress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t std) {
    apply { std.egress_spec = 2; }
}

control NoEgress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t std) {
    apply { }
}

V1Switch(EthParser(), Pass(), FwdIngress(), NoEgress(), Pass(), EthDeparser()) main;
