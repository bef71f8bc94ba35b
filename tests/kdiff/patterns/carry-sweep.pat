# reads behind and ahead of the last position, over two batches: where a sweep
# continues after a burst
R 327680 4096 s
R 360448 4096 s
R 393216 4096 s
R 425984 4096 s
R 163840 4096 s
R 196608 4096 s
R 229376 4096 s
-
R 376832 4096 s
R 245760 4096 s
R 409600 4096 s
R 81920 4096 s
R 344064 4096 s
R 491520 4096 s
R 16384 4096 s
R 294912 4096 s
