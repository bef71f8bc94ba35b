# one 1020 KiB write of 255 separate pages: split at max_segments
W 0 1044480 s
