"""FLOPs: the model's FLOP document (counted by instrument/), FLOPs from
recorded operator shapes, and GPU peaks for MFU."""
