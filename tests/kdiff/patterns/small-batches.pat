# batches of two (io_submit does not plug them) and one of three
W 0 4096 s
W 4096 4096 s
-
W 8192 4096 s
W 12288 4096 s
-
W 16384 4096 s
W 20480 4096 s
W 24576 4096 s
