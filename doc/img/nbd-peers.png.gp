set terminal pngcairo size 900,540 noenhanced font ',10'
set output "nbd-peers.png"
DATA = "nbd-peers.png.dat"
set title "nbd-peers, 2026-12-03T17:56:34Z"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set ylabel 'k IOPS (median)'
set yrange [0:*]
set key top right
set grid ytics
set key autotitle columnhead
plot DATA using 2:xtic(1) title "rqnbd", DATA using 3:xtic(1) title "nbdkit-memory", DATA using 4:xtic(1) title "qemu-nbd-shm"
