# one 8 MiB contiguous write: split at max_sectors
W 4194304 8388608 c
