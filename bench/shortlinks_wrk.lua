-- wrk script for bench/shortlinks.py: GET /s/CODE over the codes in a file (one per
-- line, passed after "--", then an optional pause in ms), round-robin per thread
-- starting at a different offset, and a JSON summary on the last line of the output
-- for the benchmark to parse.
local codes = {}
local next_index = 1
local pause_ms = 0

function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then codes[#codes + 1] = line end
  end
  if #codes == 0 then error("no codes in " .. tostring(args[1])) end
  next_index = math.random(#codes)
  pause_ms = tonumber(args[2] or "0") or 0
end

-- A paced load (bench/shortlinks.py --rate): wrk waits this long after an answer
-- before the connection's next request.
function delay()
  return pause_ms
end

function request()
  local code = codes[next_index]
  next_index = next_index % #codes + 1
  return wrk.format("GET", "/s/" .. code)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"errors_connect":%d,"errors_read":%d,' ..
    '"errors_write":%d,"errors_timeout":%d,"errors_status":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
