set terminal pngcairo size 900,540 noenhanced font ',10'
set output "sched-threads.png"
DATA = "sched-threads.png.dat"
set multiplot layout 1,2 title "sched-table, 2026-12-03T17:54:27Z"
set xlabel 'submitting threads'
set ylabel 'M IOPS (median)'
set xtics ('1' 1, '2' 2, '3' 3)
set xrange [0.7:3.3]
set yrange [0:*]
set key top left
set grid
set title "randread"
plot DATA index 0 with linespoints lw 2 title "none", DATA index 1 with linespoints lw 2 title "mq-deadline", DATA index 2 with linespoints lw 2 title "kyber", DATA index 3 with linespoints lw 2 title "bfq"
set title "randwrite"
plot DATA index 4 with linespoints lw 2 title "none", DATA index 5 with linespoints lw 2 title "mq-deadline", DATA index 6 with linespoints lw 2 title "kyber", DATA index 7 with linespoints lw 2 title "bfq"
unset multiplot
