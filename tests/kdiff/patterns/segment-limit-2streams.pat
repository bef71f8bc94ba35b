# two streams of 124 KiB scattered writes (31 segments each), alternating, in
# one plug of ten: merged at insert, each stream's request stops at the
# 128-segment limit (four fit, the fifth starts a new request)
W 0 126976 s
W 33554432 126976 s
W 126976 126976 s
W 33681408 126976 s
W 253952 126976 s
W 33808384 126976 s
W 380928 126976 s
W 33935360 126976 s
W 507904 126976 s
W 34062336 126976 s
