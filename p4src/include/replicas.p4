// Egress: each multicast copy of a result is addressed to its host, so
// workers and the PS receive it on an ordinary UDP socket; a copy to a child
// switch (rid 0) leaves as it is, and that switch addresses its own copies.
// A worker's copy keeps the source forwarding.p4 gave the result (the PS's
// address); the PS's copy comes from the address of the switch where the
// job's sums complete (this one, or the top above a child), which the PS
// knows (esa-ps --switch-addr) and never drops as its own (martian).
#ifndef ESA_REPLICAS_P4
#define ESA_REPLICAS_P4

control ReplicaRewrite(inout ethernet_h ethernet, inout ipv4_h ipv4, inout udp_h udp,
                       in esa_h esa, inout outcome_t outcome, inout standard_metadata_t std) {
    action set_dst(mac_t mac, ip4_t ip, bit<16> udp_port) {
        ethernet.dst = mac;
        ipv4.dst = ip;
        udp.dport = udp_port;
        outcome.ip_rewritten = true;
    }

    action set_dst_from_switch(mac_t mac, ip4_t ip, bit<16> udp_port, ip4_t switch_ip) {
        set_dst(mac, ip, udp_port);
        ipv4.src = switch_ip;
    }

    // Replication id -> one host's addresses (installed per job member):
    // set_dst for a worker, set_dst_from_switch for a PS.
    table replicas {
        key = { std.egress_rid: exact @name("rid"); }
        actions = { set_dst; set_dst_from_switch; NoAction; }
        default_action = NoAction();
        size = REPLICAS_TABLE_SIZE;
    }

    apply {
        if (esa.isValid()) {
            if ((esa.ptype == PTYPE_PS_RESULT || esa.ptype == PTYPE_PULL) &&
                std.egress_port == std.ingress_port) {
                mark_to_drop(std);  // D2: a PS result spreads over the job's tree, never back
            } else if (std.egress_rid != 0) {
                replicas.apply();
            }
        } else if (std.egress_port == std.ingress_port) {
            mark_to_drop(std);  // an L2 flood does not return to its sender
        }
    }
}

#endif
