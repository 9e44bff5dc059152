"""The reference switch: ``esa.model`` behind a P4Runtime server, run as
``esa-refswitch`` where BMv2 is missing and held equal to BMv2 frame by frame."""
