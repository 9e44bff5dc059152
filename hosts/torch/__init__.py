"""PyTorch through the switch: the DDP communication hook (``hook``), the
``esa`` process-group backend (``backend``) and their settings
(``config``).  Imports ``hosts.worker`` and below."""
