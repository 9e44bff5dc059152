"""The ESA controller: it installs the pipeline, jobs, priorities and
multicast groups on every switch of a fabric, and serves the admin API.

Three floors, each importing only from those below it and from
``controller.errors`` (tests/test_layout.py checks it):

``controller.device``
    one switch: the P4Runtime session, the typed switch API, the entries as
    plain values, and bringing a switch to the entries it should hold.
``controller.world``
    what the controller knows and wants: the topology and fabric, the jobs
    in its state file, their priorities and partitions, and the entries
    every switch must hold for them.
``controller.api``
    the admin API: its messages and codec, the checks of a request, the
    operations on the fabric, the gRPC server, metrics, and ``esa-ctl``.
"""
