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

    // The PS of the chunk in the header and the group of its result.
    port_t ps_port = 0;
    mac_t ps_mac = 0;
    ip4_t ps_ip = 0;
    mcast_grp_t ps_mgid_all = 0;
    ip4_t ps_switch_ip = 0;

    // switch_ip: the address of the switch where the job's sums complete
    // (0: the fabric names none), the source of a sum sent to the PS alone.
    action set_ps(port_t port, mac_t mac, ip4_t ip, mcast_grp_t mgid_all, ip4_t switch_ip) {
        ps_port = port;
        ps_mac = mac;
        ps_ip = ip;
        ps_mgid_all = mgid_all;
        ps_switch_ip = switch_ip;
    }

    action no_ps_route() {
        outcome.dest = dest_t.DROP;
        outcome.drop_reason = drop_t.NO_PS_ROUTE;
    }

    // Keyed by the chunk in the header: after a preemption or a reclaim
    // that is the evicted chunk (job and seq), whose shard's PS receives
    // the partial.  One entry per shard: seq & (shards - 1) == shard.
    table ps_route {
        key = {
            esa.job: exact @name("job");
            esa.seq[PS_SHARD_BITS - 1:0]: ternary @name("shard");
        }
        actions = { set_ps; @defaultonly no_ps_route; }
        default_action = no_ps_route();
        size = PS_ROUTE_TABLE_SIZE;
    }

    apply {
        if (!esa.isValid()) {
            l2.apply();
        } else {
            udp.checksum = 0;
            if (outcome.dest == dest_t.PS || outcome.dest == dest_t.ALL) {
                ps_route.apply();
            }
            if (outcome.dest == dest_t.PS) {
                std.egress_spec = ps_port;
                ethernet.dst = ps_mac;
                ipv4.dst = ps_ip;
                outcome.ip_rewritten = true;
                if (esa.ptype == PTYPE_RESULT && ps_switch_ip != 0) {
                    // A held sum (ATP) comes from the switch's address, as
                    // the PS's copy of a sum sent to all does (replicas.p4).
                    ipv4.src = ps_switch_ip;
                }
            } else if (outcome.dest == dest_t.ALL) {
                // Results come from the PS's address, as a PS result would;
                // the copies go to the workers and the PS of the chunk's
                // shard, whose copy the egress sends from the switch's
                // address (replicas.p4: a host drops its own as a source).
                ipv4.src = ipv4.dst;
                outcome.ip_rewritten = true;
                std.mcast_grp = ps_mgid_all;
            } else if (outcome.dest == dest_t.WORKERS) {
                std.mcast_grp = job.mgid_workers;
            } else if (outcome.dest == dest_t.UP) {
                std.egress_spec = job.up_port;
            }
            if (outcome.dest == dest_t.DROP) {
                mark_to_drop(std);
            }
        }
    }
}

#endif
