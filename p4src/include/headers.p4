// Standard headers, the header stack and the per-packet metadata.
#ifndef ESA_HEADERS_P4
#define ESA_HEADERS_P4

#include "wire.p4"
#include "codes.p4"
#include "jobrow.p4"

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8> IPPROTO_UDP = 17;

typedef bit<48> mac_t;
typedef bit<32> ip4_t;

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

// The policy table and the job table's row for the arriving packet's job.
struct job_meta_t {
    job_t id;            // the arriving packet's job (the header may change)
    policy_t policy;
    usec_t stale_us;
    usec_t squat_us;
    ESA_JOB_ROW_FIELDS   // the job table's row (jobrow.p4)
}

// The chunk's slot and what was read from it.
struct slot_meta_t {
    bool to_pool;        // Admission passed the packet on to the slot pool
    bool no_slot;        // STATIC policy, job without a partition
    bool transit;        // a fallback or partial from another switch, bound for its PS
    bool lends;          // rule L: ESA, a job with a home
    bool borrows;        // rule L, and the home leaves slots outside it: guest_idx is set
    bool has_second;     // ESA: the chunk has a second slot h' (second_idx), not h
    slot_idx_t idx;
    slot_idx_t second_idx; // ESA: h', half the home away, or a job without a home's second hash
    slot_idx_t guest_idx; // rule L: the slot outside the home a busy home borrows (g)
    chunk_key_t owner;
    bitmap_t bitmap;
    count_t count;
    slot_state_t state;
}

// What happens to the packet, and what is counted.
struct outcome_t {
    verdict_t verdict;
    dest_t dest;
    drop_t drop_reason;
    event_t ev1;          // events of the arriving packet's job
    event_t ev2;
    event_t victim_ev;    // event of victim_job
    job_t victim_job;
    bool sum_out;         // the packet now carries a sum out of a slot
    bool ip_rewritten;    // an IPv4 address changed: recompute the checksum
}

struct metadata_t {
    job_meta_t job;
    slot_meta_t slot;
    outcome_t outcome;
}

#endif
