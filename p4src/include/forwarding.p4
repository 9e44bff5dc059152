// Forwarding: plain L2 for other traffic; for ESA packets, the PS route or
// the job's multicast group chosen by the slot rules (meta.dest).
#ifndef ESA_FORWARDING_P4
#define ESA_FORWARDING_P4

control Forwarding(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t std) {
    action to_port(port_t port) {
        std.egress_spec = port;
    }

    action flood(bit<16> mgid) {
        std.mcast_grp = mgid;
    }

    action l2_drop() {
        mark_to_drop(std);
    }

    table l2 {
        key = { hdr.ethernet.dst: exact; }
        actions = { to_port; flood; @defaultonly l2_drop; }
        default_action = l2_drop();
        size = 1024;
    }

    action set_ps(port_t port, mac_t mac, ip4_t ip) {
        std.egress_spec = port;
        hdr.ethernet.dst = mac;
        hdr.ipv4.dst = ip;
        meta.ip_rewritten = 1;
    }

    action no_ps_route() {
        meta.dest = DEST_DROP;
        meta.drop_reason = DROP_NO_PS_ROUTE;
    }

    // Keyed by the job in the header: after a preemption that is the
    // evicted job, whose PS receives the partial.
    table ps_route {
        key = { hdr.esa.job: exact; }
        actions = { set_ps; @defaultonly no_ps_route; }
        default_action = no_ps_route();
        size = MAX_JOB_ID + 1;
    }

    apply {
        if (!hdr.esa.isValid()) {
            l2.apply();
        } else {
            hdr.udp.checksum = 0;
            if (meta.dest == DEST_PS) {
                ps_route.apply();
            } else if (meta.dest == DEST_ALL) {
                // Results come from the PS's address, as a PS result would.
                hdr.ipv4.src = hdr.ipv4.dst;
                meta.ip_rewritten = 1;
                std.mcast_grp = meta.mgid_all;
            } else if (meta.dest == DEST_WORKERS) {
                std.mcast_grp = meta.mgid_workers;
            }
            if (meta.dest == DEST_DROP) {
                mark_to_drop(std);
            }
        }
    }
}

#endif
