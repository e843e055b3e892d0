export { Caller, callerTag, idPart } from "./caller.js";
export { TrustedProxies, type HeaderLines } from "./forwarded.js";
export { parseIp, formatIp, groupIp, canonical, Network, type Ip } from "./ip.js";
export { addHeaders, denied, forbidden, unavailable, concurrencyLimited, problemBody, type Answer, type Described } from "./response.js";
export { llmHeaders, setLlmHeaders, llmDuration, budgetOf, budgetOfInspection, type Budget, type HeaderSink } from "./llm.js";
