"""The host programs: ``esa-ps`` (``ps_cli``), ``esa-worker``
(``worker_cli``) and ``esa-train`` (``train_cli``, training the model of
``training``), what they share around their work (``program``), and the
synthetic gradients a run recomputes to check its sums (``gradients``).
Imports ``hosts.worker``, ``hosts.ps`` and below."""
