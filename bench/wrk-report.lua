-- wrk script of bench/chat-overhead.sh and bench/load.sh: the request comes from variables, and
-- the result is one machine-readable line, `WRK {json}`, latencies in microseconds.
--   WRK_METHOD      GET (default) or POST
--   WRK_BODY        a fixed JSON body
--   WRK_BODY_TEMPLATE  a JSON body with one %s, replaced per request by a fresh device id
--                   (bench-<thread>-<n>), so per-device limits never bite
--   WRK_API_KEY     sent as X-Api-Key
wrk.method = os.getenv("WRK_METHOD") or "GET"
local key = os.getenv("WRK_API_KEY")
if key then
  wrk.headers["X-Api-Key"] = key
end
local body = os.getenv("WRK_BODY")
if body then
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
end

local template = os.getenv("WRK_BODY_TEMPLATE")
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

if template then
  wrk.headers["Content-Type"] = "application/json"
  local n = 0
  local run = tostring(os.time())
  function request()
    n = n + 1
    local device = string.format("bench-%s-%d-%d", run, tid or 0, n)
    return wrk.format(nil, nil, nil, string.format(template, device))
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,' ..
    '"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    latency.mean))
end
