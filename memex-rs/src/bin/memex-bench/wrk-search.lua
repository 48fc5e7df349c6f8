-- wrk script for BENCHMARKS.md: GET /api/search, rotating over the search benchmark's queries.
local queries = {
  "timezone", "webhook%20signature", "memory%20leak", "TypeError",
  "retry%20backoff", "database%20migration", "refresh%20token%20handler", "npm%20test",
}
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/api/search?limit=10&q=" .. queries[(n % #queries) + 1])
end
