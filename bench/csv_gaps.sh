# Shell functions the benchmarks that time stalls share; source it.

# The largest and the median gap (ms) between successive step rows of a
# trainer CSV log (kind,epoch,clock,time_s,...), as "max,median".
gaps() {
  awk -F, '$1 == "step" { if (seen) print ($4 - last) * 1000; last = $4;
    seen = 1 }' "$1" | sort -g | awk '{ g[n++] = $1 }
    END { if (n == 0) print "nan,nan";
          else printf "%.0f,%.1f\n", g[n - 1], g[int(n / 2)] }'
}

# The median of the numbers on stdin.
median() {
  sort -g | awk '{ v[n++] = $1 } END { if (n) print v[int((n - 1) / 2)] }'
}

# The P-th percentile (nearest rank) of the numbers on stdin.
percentile() {
  sort -g | awk -v p="$1" '{ v[n++] = $1 }
    END { if (n) { r = int((p * n + 99) / 100); print v[(r < 1 ? 1 : r) - 1] } }'
}
