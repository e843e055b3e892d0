------------------------------------------------------------------------------------------------------------
-- Reservations (core's reservation.rs): a token bucket's decision with a queue in it, on the bucket's
-- own state; its requests are `cost max_wait`.
------------------------------------------------------------------------------------------------------------
local reserve = declared("reservation", {
  layout = "token", parse = token.parse, peek = token.peek, describe = token.describe, refund = token.refund,
})

function reserve.request(_, r)
  return { cost = P.cost(r.cost), max_wait = P.wait_ns(r.max_wait) }
end

function reserve.decide(b, stored, now, r)
  return (token.reserve(b, stored, now, r.cost, r.cost, r.max_wait))
end
