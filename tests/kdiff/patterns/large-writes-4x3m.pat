# four sequential 3 MiB writes: splits whose tails merge with the next
W 8388608 3145728 c
W 11534336 3145728 c
W 14680064 3145728 c
W 17825792 3145728 c
