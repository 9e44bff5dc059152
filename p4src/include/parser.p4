// Parser and deparser: Ethernet / IPv4 / UDP / ESA header / K values.
#ifndef ESA_PARSER_P4
#define ESA_PARSER_P4

parser EsaParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t std) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, IPPROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dport) {
            ESA_UDP_PORT: parse_esa;
            default: accept;
        }
    }
    state parse_esa {
        pkt.extract(hdr.esa);
        pkt.extract(hdr.vals);
        transition accept;
    }
}

control EsaDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.esa);
        pkt.emit(hdr.vals);
    }
}

control NoVerify(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

// The switch rewrites IPv4 addresses only on packets it redirects.
control Ipv4Checksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(meta.outcome.ip_rewritten,
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp_ecn, hdr.ipv4.total_len,
              hdr.ipv4.id, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src, hdr.ipv4.dst },
            hdr.ipv4.checksum, HashAlgorithm.csum16);
    }
}

#endif
