"""Processes and Mininet nodes for the switches a run starts: BMv2, the
reference switch, their network namespaces and BMv2's Thrift register reads."""
