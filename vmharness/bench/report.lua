-- wrk's done() hook for vmharness: one line, a marker and a JSON object, when the run ends.
-- Latencies are in microseconds, as wrk keeps them; errors.status counts non-2xx/3xx responses.
local marker = "VMHARNESS-WRK "
local quantiles = { 50, 75, 90, 99, 99.9, 99.99 }

done = function(summary, latency, requests)
  local e = summary.errors
  local parts = {}
  for _, q in ipairs(quantiles) do
    parts[#parts + 1] = string.format('"%g": %d', q, latency:percentile(q))
  end
  io.write(marker .. string.format(
    '{"duration_us": %d, "requests": %d, "bytes": %d, '
      .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, '
      .. '"latency_us": {"min": %d, "mean": %.3f, "stdev": %.3f, "max": %d, "percentiles": {%s}}}\n',
    summary.duration, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.stdev, latency.max, table.concat(parts, ", ")))
end
