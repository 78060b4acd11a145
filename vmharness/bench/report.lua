-- wrk's done() hook for vmharness: one line, a marker and a JSON object, when the run ends.
-- Latencies are in microseconds, as wrk keeps them; errors.status counts non-2xx/3xx responses.
-- latency_us.histogram is wrk's whole latency distribution (vmharness/bench/histogram.py reads it):
-- runs of consecutive microseconds, [first_us, count, count, ...], a run carrying up to GAP empty
-- microseconds. wrk hands out its non-empty microseconds one by one (latency(i) -> value, count),
-- each call scanning from the fastest, so reading is cut short after BUDGET_S seconds of CPU, and the
-- histogram is then left out with the reason, as it is for wrk2 (whose latency cannot be called).
-- An argument after wrk's `--` is a pipeline depth: each connection then sends that many requests
-- back to back (wrk counts the requests in what request() returns, and waits for all their answers).
local marker = "VMHARNESS-WRK "
local quantiles = { 50, 75, 90, 99, 99.9, 99.99 }
local GAP = 3
local BUDGET_S = 5

local function histogram(latency)
  if not pcall(latency, 1) then
    return nil, "this wrk does not hand out its histogram (wrk2?)"
  end
  local runs, run, last = {}, nil, nil
  local started = os.clock()
  for i = 1, #latency do
    local v, c = latency(i)
    if last == nil or v - last - 1 > GAP then
      if run then runs[#runs + 1] = "[" .. table.concat(run, ",") .. "]" end
      run = { string.format("%d", v) }
    else
      for _ = last + 2, v do run[#run + 1] = "0" end
    end
    run[#run + 1] = string.format("%d", c)
    last = v
    if i % 256 == 0 and os.clock() - started > BUDGET_S then
      return nil, string.format("reading it took over %d s", BUDGET_S)
    end
  end
  if run then runs[#runs + 1] = "[" .. table.concat(run, ",") .. "]" end
  return "[" .. table.concat(runs, ",") .. "]"
end

init = function(args)
  local depth = tonumber(args[1] or "1") or 1
  if depth > 1 then
    local batch = string.rep(wrk.format(), depth)
    request = function() return batch end
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  local parts = {}
  for _, q in ipairs(quantiles) do
    parts[#parts + 1] = string.format('"%g": %d', q, latency:percentile(q))
  end
  local hist, why = histogram(latency)
  local kept = hist and ('"histogram": ' .. hist) or string.format('"histogram": null, "no_histogram": "%s"', why)
  io.write(marker .. string.format(
    '{"duration_us": %d, "requests": %d, "bytes": %d, '
      .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, '
      .. '"latency_us": {"min": %d, "mean": %.3f, "stdev": %.3f, "max": %d, "percentiles": {%s}, %s}}\n',
    summary.duration, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.stdev, latency.max, table.concat(parts, ", "), kept))
end
