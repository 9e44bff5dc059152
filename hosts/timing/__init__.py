"""How long a host waits, learnt from what it observes, in any unit (the
packet simulator uses both in nanoseconds): a worker's retransmission
timeout (``rto``) and the PS's stall before it pulls (``ps_stall``).
Imports ``esa`` only."""
