# 2 MiB reads and writes interleaved: splits at max_sectors, both directions
R 16777216 2097152 c
W 0 2097152 c
R 18874368 2097152 c
W 2097152 2097152 c
R 20971520 2097152 c
W 4194304 2097152 c
