# back merge, front merges, then back merges again
W 8192 4096 s
W 12288 4096 s
W 4096 4096 s
W 0 4096 s
W 16384 4096 s
W 20480 8192 s
