"""What both ends put on and take off the network: the fast-path codec
(``payload``) and the Scapy layer with its capture printer
(``scapy_layer``, ``pcap_dump``), UDP sockets (``transport``), int32 fixed
point (``quant``), the checks of a datagram (``checks``), the reasons a
host drops one (``drops``) and what it counts (``counters``), and the
token bucket that bounds replies (``budget``).  Imports ``esa`` only."""
