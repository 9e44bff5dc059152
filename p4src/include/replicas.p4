// Egress: each multicast copy of a result is addressed to its host, so
// workers and the PS receive it on an ordinary UDP socket.
#ifndef ESA_REPLICAS_P4
#define ESA_REPLICAS_P4

control ReplicaRewrite(inout headers_t hdr, inout metadata_t meta,
                       inout standard_metadata_t std) {
    action set_dst(mac_t mac, ip4_t ip, bit<16> udp_port) {
        hdr.ethernet.dst = mac;
        hdr.ipv4.dst = ip;
        hdr.udp.dport = udp_port;
        meta.ip_rewritten = 1;
    }

    // Replication id -> one host's addresses (installed per job member).
    table replicas {
        key = { std.egress_rid: exact; }
        actions = { set_dst; NoAction; }
        default_action = NoAction();
        size = 4096;
    }

    apply {
        if (hdr.esa.isValid()) {
            if (std.egress_rid != 0) {
                replicas.apply();
            }
        } else if (std.egress_port == std.ingress_port) {
            mark_to_drop(std);  // an L2 flood does not return to its sender
        }
    }
}

#endif
