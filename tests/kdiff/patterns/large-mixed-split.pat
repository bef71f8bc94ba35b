# a 2 MiB write, 4 KiB writes around it, a 640 KiB scattered read
W 1040384 4096 s
W 1048576 2097152 c
W 1044480 4096 s
W 3145728 4096 s
R 16777216 655360 s
