// Forwarding: plain L2 for other traffic; for ESA packets, the PS route or
// the job's multicast group chosen by the slot rules (outcome.dest).
#ifndef ESA_FORWARDING_P4
#define ESA_FORWARDING_P4

control Forwarding(inout ethernet_h ethernet, inout ipv4_h ipv4, inout udp_h udp,
                   in esa_h esa, in job_meta_t job, inout outcome_t outcome,
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
        key = { ethernet.dst: exact @name("dst"); }
        actions = { to_port; flood; @defaultonly l2_drop; }
        default_action = l2_drop();
        size = L2_TABLE_SIZE;
    }

    action set_ps(port_t port, mac_t mac, ip4_t ip) {
        std.egress_spec = port;
        ethernet.dst = mac;
        ipv4.dst = ip;
        outcome.ip_rewritten = true;
    }

    action no_ps_route() {
        outcome.dest = dest_t.DROP;
        outcome.drop_reason = drop_t.NO_PS_ROUTE;
    }

    // Keyed by the job in the header: after a preemption that is the
    // evicted job, whose PS receives the partial.
    table ps_route {
        key = { esa.job: exact @name("job"); }
        actions = { set_ps; @defaultonly no_ps_route; }
        default_action = no_ps_route();
        size = JOB_TABLE_SIZE;
    }

    apply {
        if (!esa.isValid()) {
            l2.apply();
        } else {
            udp.checksum = 0;
            if (outcome.dest == dest_t.PS) {
                ps_route.apply();
            } else if (outcome.dest == dest_t.ALL) {
                // Results come from the PS's address, as a PS result would.
                ipv4.src = ipv4.dst;
                outcome.ip_rewritten = true;
                std.mcast_grp = job.mgid_all;
            } else if (outcome.dest == dest_t.WORKERS) {
                std.mcast_grp = job.mgid_workers;
            }
            if (outcome.dest == dest_t.DROP) {
                mark_to_drop(std);
            }
        }
    }
}

#endif
