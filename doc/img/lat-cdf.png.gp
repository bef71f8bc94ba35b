set terminal pngcairo size 900,540 noenhanced font ',10'
set output "lat-cdf.png"
DATA = "lat-cdf.png.dat"
set title "latency CDF: randrw, completion thread, depth 32, 1 thread"
set logscale x 10
set xlabel 'latency, submit to end_io (us, log scale)'
set ylabel 'fraction of bios'
set yrange [0:1.02]
set key bottom right
set grid
plot DATA index 0 with steps lw 2 title "none (p99 8.8 us)", DATA index 1 with steps lw 2 title "mq-deadline (p99 21.2 us)", DATA index 2 with steps lw 2 title "kyber (p99 17.2 us)", DATA index 3 with steps lw 2 title "bfq (p99 57.9 us)", DATA index 4 with steps lw 2 title "sq:noop (p99 39.4 us)"
