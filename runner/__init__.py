"""`make run` and `make cli`: the scenario's jobs on Mininet, under each scheme,
on BMv2 or the reference switch.

``main`` is the command and ``launch`` starts it in a private world, whose
results directory ``lock`` claims; ``paths`` names the
directories and ``devices`` starts the switch processes (``stop`` is ``make stop``); ``scenario``
reads what to run and ``network`` where (the fabric: switches, hosts,
ports, links); ``switches`` picks the switch and its program; ``world``
builds the network, a switch process per switch of the fabric, and the
controller, ``links`` applies link properties and ``capture`` records the
ports where the switch does not; ``batch`` runs the schemes and ``prompt`` is
the mininet> prompt; ``jobs`` launches and follows the PSes and workers
(``lines`` reads what they write), ``faults``
and ``inject`` carry out the requested failures, ``timeline`` samples the
slot pool, ``verify`` checks the sums and ``report`` prints and writes the
results.
"""
