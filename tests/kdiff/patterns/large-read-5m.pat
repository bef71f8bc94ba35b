# one 5 MiB contiguous read
R 4194304 5242880 c
