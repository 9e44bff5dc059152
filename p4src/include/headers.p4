// Standard headers, the header stack and the per-packet metadata.
#ifndef ESA_HEADERS_P4
#define ESA_HEADERS_P4

#include "wire.p4"
#include "codes.p4"

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8> IPPROTO_UDP = 17;

typedef bit<48> mac_t;
typedef bit<32> ip4_t;
typedef bit<9> port_t;

header ethernet_h {
    mac_t dst;
    mac_t src;
    bit<16> ether_type;
}

header ipv4_h {
    bit<4> version;
    bit<4> ihl;
    bit<8> dscp_ecn;
    bit<16> total_len;
    bit<16> id;
    bit<3> flags;
    bit<13> frag_offset;
    bit<8> ttl;
    bit<8> protocol;
    bit<16> checksum;
    ip4_t src;
    ip4_t dst;
}

header udp_h {
    bit<16> sport;
    bit<16> dport;
    bit<16> len;
    bit<16> checksum;
}

struct headers_t {
    ethernet_h ethernet;
    ipv4_h ipv4;
    udp_h udp;
    esa_h esa;
    esa_values_h vals;
}

// Where a packet goes when ingress ends.
const bit<2> DEST_DROP = 0;
const bit<2> DEST_PS = 1;       // the PS of hdr.esa.job (after any rewrite)
const bit<2> DEST_ALL = 2;      // multicast: the job's workers and its PS
const bit<2> DEST_WORKERS = 3;  // multicast: the job's workers

struct metadata_t {
    // policy table
    bit<8> policy;
    bit<48> stale_us;
    // jobs table: the arriving packet's job
    bit<16> job;
    bit<8> fan_in;
    bit<32> worker_mask;
    bit<8> prio;
    port_t ps_port;
    bit<16> mgid_all;
    bit<16> mgid_workers;
    bit<32> part_base;
    bit<32> part_size;
    // the slot and what was read from it
    bit<32> idx;
    bit<48> owner;
    bit<32> bitmap;
    bit<8> count;
    bit<8> state;
    // outcome
    bit<8> verdict;
    bit<2> dest;
    bit<32> drop_reason;
    bit<32> ev1;        // events of meta.job (EV_NONE = none)
    bit<32> ev2;
    bit<32> victim_ev;  // event of meta.victim_job
    bit<16> victim_job;
    bit<1> to_pool;       // Admission passed it on to the slot pool
    bit<1> no_slot;       // STATIC policy, job without a partition
    bit<1> sum_out;       // the packet now carries a sum out of a slot
    bit<1> ip_rewritten;  // an IPv4 address changed: recompute the checksum
}

#endif
