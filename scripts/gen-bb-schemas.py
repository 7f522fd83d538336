#!/usr/bin/env python3
"""Regenerates rules/schema/bb-thread-delta-params.schema.json and bb-thread-event.schema.json
from one definition of bb's zod schemas (thread-delta.ts, provider-event.ts). Run from anywhere;
tests/bb_schema.rs checks the output against rules/schema/bb-grammar-v3.md."""
import json, copy, os
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
def S(**k): return k
string={"type":"string"}; ne={"type":"string","minLength":1}; num={"type":"number"}; boolean={"type":"boolean"}
def opt(d): return d
def obj(req, props, extra=None):
    o={"type":"object","required":req,"properties":props}
    if extra: o.update(extra)
    return o
def ref(n): return {"$ref":"#/$defs/"+n}
def nullable(t): return {"anyOf":[t,{"type":"null"}]}
ITEM_STATUS=["pending","completed","failed","interrupted"]
TURN_STATUS=["completed","failed","interrupted"]
common_defs={
 "keyPart":{"type":"string","minLength":1,"not":{"pattern":"\u001f"},"description":"a provider key part: non-empty, without U+001F"},
 "clientTurnRequestId":{"type":"string","pattern":"^creq_[23456789abcdefghijkmnpqrstuvwxyz]{10}$","description":"creq_ + 10 characters of 23456789abcdefghijkmnpqrstuvwxyz"},
 "itemStatus":{"enum":ITEM_STATUS},
 "turnStatus":{"enum":TURN_STATUS},
 "planStepStatus":{"enum":["pending","active","completed","failed"]},
 "planStep":obj(["step"],{"step":string,"status":ref("planStepStatus")}),
 "extensionKind":{"type":"string","pattern":"^[a-z0-9-]+/[a-z0-9-]+$","description":"<pluginId>/<name>: lowercase letters, digits and -"},
 "presentation":obj(["label","icon"],{
    "label":obj(["pending","completed"],{"pending":ne,"completed":ne}),
    "icon":obj(["glyph"],{"glyph":ne}),
    "title":string,
    "detail":{"type":"string","maxLength":280},
    "suppress":boolean,
    "tint":obj(["light","dark"],{"light":ne,"dark":ne}),
    "badge":obj(["glyph","label","hint","tone"],{"glyph":ne,"label":{"type":"string","minLength":1,"maxLength":80},"hint":{"type":"string","minLength":1,"maxLength":80},"tone":{"enum":["neutral","destructive"]}}),
 }),
 "jsonValue":{"description":"any JSON value"},
 "providerRawEvent":obj(["jsonrpc","method"],{"jsonrpc":{"const":"2.0"},"id":{"type":["string","number"]},"method":string,"params":ref("jsonValue")}),
 "tokenBreakdown":obj(["totalTokens","inputTokens","cachedInputTokens","outputTokens","reasoningOutputTokens"],{k:num for k in ["totalTokens","inputTokens","cachedInputTokens","outputTokens","reasoningOutputTokens"]}),
 "providerErrorCategory":{"enum":["active-turn-not-steerable","bad-request","connection-failed","context-window-exceeded","billing","budget-exceeded","internal","max-output-tokens","max-turns","overloaded","policy","rate-limit","sandbox","stream-disconnected","structured-output-retries","thread-rollback-failed","too-many-failed-attempts","unauthorized","unknown"]},
 "warningCategory":{"enum":["deprecation","config","general","compaction-skipped"]},
 "rateLimitStatus":{"enum":["allowed","warning","blocked","unknown"]},
 "rateLimits":obj(["providerId","status","kind","windows","reachedReason","overageStatus","overageReason"],{
    "providerId":ne,"status":ref("rateLimitStatus"),"kind":{"enum":["subscription-window","credits","spend-control","unknown"]},
    "windows":{"type":"array","items":obj(["providerKey","label","status","resetsAtMs"],{"providerKey":nullable(ne),"label":nullable(ne),"status":ref("rateLimitStatus"),"resetsAtMs":nullable({"type":"integer","minimum":0})})},
    "reachedReason":nullable(ne),"overageStatus":{"enum":["allowed","warning","rejected","unavailable",None]},"overageReason":nullable(ne)}),
 "backgroundTaskStatus":{"enum":["pending","running","paused","completed","failed","killed","stopped"]},
 "workflowSnapshot":obj(["phases","agents"],{
    "phases":{"type":"array","items":obj(["index","title"],{"index":{"type":"integer","minimum":1},"title":string,"kind":string})},
    "agents":{"type":"array","items":obj(["index","label","state","model","attempt","cached","lastProgressAt"],{"index":{"type":"integer","minimum":1},"label":string,"state":{"enum":["queued","running","done","failed","skipped"]},"model":string,"attempt":{"type":"integer","minimum":1},"cached":boolean,"lastProgressAt":num})}}),
 "backgroundTaskUsage":obj(["totalTokens","toolUses","durationMs"],{"totalTokens":num,"toolUses":num,"durationMs":num}),
}

# ---------------- thread/delta params ----------------
def shape(t, req, props): 
    p={"type":{"const":t}}; p.update(props); return obj(["type"]+req,p)
bg_shape=shape("backgroundTask",["familyId","taskType","description","status","taskStatus","skipTranscript"],{"familyId":ne,"taskType":string,"description":string,"status":ref("itemStatus"),"taskStatus":ref("backgroundTaskStatus"),"skipTranscript":boolean,"workflowName":string,"workflow":ref("workflowSnapshot"),"usage":ref("backgroundTaskUsage"),"summary":string,"error":string,"outputFile":string})
deleg_shape=shape("delegation",["childRef","label","background"],{"childRef":ref("keyPart"),"label":string,"background":boolean,"summary":string})
shapes={
 "command":shape("command",["command","cwd"],{"command":string,"cwd":string,"aggregatedOutput":string,"exitCode":num,"durationMs":num}),
 "fileChange":shape("fileChange",["changes"],{"changes":{"type":"array","items":obj(["path","kind"],{"path":string,"kind":{"enum":["add","update","delete"]},"movePath":string,"diff":string,"oldText":string,"newText":string})}}),
 "tool":shape("tool",["tool"],{"tool":string,"server":string,"args":ref("jsonValue"),"result":ref("jsonValue"),"error":string,"durationMs":num}),
 "compaction":shape("compaction",[],{}),
 "agentMessage":shape("agentMessage",["text"],{"text":string,"asyncQuestion":obj(["id","payload"],{"id":ne,"payload":{"type":"object"}})}),
 "reasoning":shape("reasoning",["summary","content"],{"summary":{"type":"array","items":string},"content":{"type":"array","items":string}}),
 "plan":shape("plan",["text"],{"text":string}),
 "webSearch":shape("webSearch",["queries"],{"queries":{"type":"array","items":string,"minItems":1}}),
 "webFetch":shape("webFetch",["url","pattern"],{"url":string,"prompt":nullable(string),"pattern":nullable(string)}),
 "imageView":shape("imageView",["path"],{"path":string}),
 "imageGeneration":shape("imageGeneration",["prompt","path","error","transparentBackground"],{"prompt":nullable(string),"path":nullable(string),"result":string,"error":nullable(string),"transparentBackground":boolean}),
 "backgroundTask":bg_shape,
 "fileRead":shape("fileRead",["path"],{"path":string,"cmd":string}),
 "search":shape("search",["mode","query"],{"mode":{"enum":["content","path","list"]},"query":string,"path":string,"cmd":string}),
 "delegation":deleg_shape,
 "planSteps":shape("planSteps",["steps"],{"steps":{"type":"array","items":ref("planStep")},"explanation":string}),
 "extension":shape("extension",["kind","payload"],{"kind":ref("extensionKind"),"payload":ref("jsonValue")}),
}
def dispatch(field, table, names=None):
    names=names or list(table)
    return {"type":"object","required":[field],"properties":{field:{"enum":names}},
            "allOf":[{"if":{"properties":{field:{"const":n}},"required":[field]},"then":table[n]} for n in names]}
ddefs=copy.deepcopy(common_defs)
ddefs["itemShape"]=dispatch("type",{k:{"$ref":"#/$defs/shape_"+k} for k in shapes})
for k,v in shapes.items(): ddefs["shape_"+k]=v
ddefs["progressSnapshot"]=dispatch("type",{"backgroundTask":ref("shape_backgroundTask"),"delegation":ref("shape_delegation")})
ddefs["itemKey"]=obj([],{"providerItemId":ref("keyPart"),"channel":ref("keyPart"),"parentRef":ref("keyPart")})
ddefs["noTurnFallback"]=obj(["raw","rawType"],{"raw":ref("providerRawEvent"),"rawType":string})
ddefs["errorInfo"]=obj(["category","providerCode","httpStatusCode"],{"category":ref("providerErrorCategory"),"providerCode":nullable(string),"httpStatusCode":nullable(num)})
tid={"providerTurnId":ref("keyPart")}
fb={"noTurnFallback":ref("noTurnFallback")}
textch={"enum":["agentMessage","reasoningSummary","reasoningText","plan"]}
attach={"enum":["open","currentOrLast"]}
ext_pres={"if":{"properties":{"item":{"properties":{"type":{"const":"extension"}},"required":["type"]}},"required":["item"]},"then":{"required":["presentation"]}}
def K(req, props, extra=None): return obj(req, props, extra)
kinds={
 "input.accepted":K(["clientRequestId"],{"clientRequestId":ref("clientTurnRequestId"),**tid}),
 "input.provider":K(["text"],{"text":ne,"parentRef":ref("keyPart")}),
 "turn.open":K([],{**tid,"parentRef":ref("keyPart")}),
 "turn.boundary":K(["status"],{"status":ref("turnStatus"),"error":obj(["message"],{"message":string}),"providerCheckpointId":ne,"claimIfIdle":boolean,**tid}),
 "item.open":K(["key","item"],{"key":ref("itemKey"),"item":ref("itemShape"),"presentation":ref("presentation"),"attach":attach,**tid,**fb},{"allOf":[ext_pres]}),
 "item.close":K(["key","status","item"],{"key":ref("itemKey"),"status":ref("itemStatus"),"resultText":string,"exitCode":num,"aggregatedOutput":string,"approvalStatus":{"const":"denied"},"item":ref("itemShape"),"presentation":ref("presentation"),**tid,**fb},{"allOf":[ext_pres]}),
 "item.progress":K(["key"],{"key":ref("itemKey"),"message":string,"snapshot":ref("progressSnapshot"),"flush":boolean,**tid,**fb}),
 "item.textDelta":K(["key","channel","text"],{"key":ref("itemKey"),"channel":textch,"text":string,**tid,**fb}),
 "item.textClose":K(["key","channel"],{"key":ref("itemKey"),"channel":textch,"text":string,**tid,**fb}),
 "item.outputDelta":K(["key","channel","text"],{"key":ref("itemKey"),"channel":{"enum":["command","fileChange"]},"text":string,**tid,**fb}),
 "command.outputSnapshot":K(["key","text"],{"key":ref("itemKey"),"text":string,**fb}),
 "usage":K(["total","last","modelContextWindow"],{"total":ref("tokenBreakdown"),"last":ref("tokenBreakdown"),"modelContextWindow":nullable(num),**tid}),
 "contextWindow":K(["used","estimated","attach"],{"snapshot":{"type":"object"},"used":nullable(num),"size":nullable(num),"estimated":boolean,"attach":attach,**tid}),
 "context.compacted":K([],{**tid,**fb}),
 "context.cleared":K([],{}),
 "turn.diff":K(["diff"],{"diff":string,**tid}),
 "thread.started":K([],{}),
 "thread.identity":K(["providerThreadId"],{"providerThreadId":ne}),
 "thread.name":K(["name"],{"name":ne}),
 "extension.state":K(["extensionKind","payload"],{"extensionKind":ref("extensionKind"),"payload":ref("jsonValue")}),
 "provider.rateLimits":K(["rateLimits"],{"rateLimits":ref("rateLimits")}),
 "provider.error":K(["message"],{"message":string,"detail":string,"willRetry":boolean,"category":ref("providerErrorCategory"),"errorInfo":ref("errorInfo"),"settlesTurn":boolean,**tid,"threadScoped":boolean}),
 "provider.modelFallback":K(["originalModel","fallbackModel","reason","message"],{"originalModel":ne,"fallbackModel":ne,"reason":{"enum":["refusal","provider"]},"message":string}),
 "provider.warning":K([],{"summary":string,"details":string,"category":ref("warningCategory"),"vouchedTurn":boolean}),
 "unhandled":K(["raw","rawType","vouchedTurn"],{"raw":ref("providerRawEvent"),"rawType":string,"vouchedTurn":boolean,"onlyIfNoTurn":boolean,"parentRef":ref("keyPart"),**tid}),
 "session.ended":K([],{}),
 "session.reset":K([],{}),
}
for k,v in kinds.items(): ddefs["delta_"+k]=v
ddefs["delta"]=dispatch("kind",{k:{"$ref":"#/$defs/delta_"+k} for k in kinds})
delta_schema={
 "$schema":"https://json-schema.org/draft/2020-12/schema",
 "$id":"https://bridgewire.dev/schema/bb-thread-delta-params.schema.json",
 "title":"bb thread/delta params, grammar v3 (reference §11), as bb's runtime validates them",
 "description":"Mirrors bb's threadDeltaNotificationParamsSchema: every delta kind with its required, optional and nullable fields, enums and formats. Unknown fields are tolerated (bb strips them); any other error refuses the whole message. Checked against the protocol document by tests/bb_schema.rs.",
 "type":"object","required":["threadId","deltas"],
 "properties":{"threadId":ne,"deltas":{"type":"array","items":ref("delta")}},
 "$defs":ddefs}
open(ROOT+'/rules/schema/bb-thread-delta-params.schema.json','w').write(json.dumps(delta_schema,indent=2,ensure_ascii=True)+"\n")

# ---------------- ThreadEvent ----------------
edefs=copy.deepcopy(common_defs)
edefs["threadScope"]=obj(["kind"],{"kind":{"const":"thread"}})
edefs["turnScope"]=obj(["kind","turnId"],{"kind":{"const":"turn"},"turnId":ne})
edefs["scope"]={"type":"object","required":["kind"],"properties":{"kind":{"enum":["thread","turn"]}},"allOf":[{"if":{"properties":{"kind":{"const":"turn"}}},"then":ref("turnScope")}]}
edefs["approvalStatus"]={"enum":["waiting_for_approval","denied",None]}
edefs["errorInfo"]=ddefs["errorInfo"]
pres={"presentation":ref("presentation"),"parentToolCallId":string}
def it(t, req, props, withpres=True):
    p={"type":{"const":t},"id":string}; p.update(props)
    if withpres: p.update(pres)
    else: p["parentToolCallId"]=string
    return obj(["type","id"]+req,p)
trunc={"type":"object"}
bg_item=it("backgroundTask",["taskType","description","status","taskStatus","skipTranscript"],{"familyId":string,"taskType":string,"description":string,"status":ref("itemStatus"),"taskStatus":ref("backgroundTaskStatus"),"skipTranscript":boolean,"workflowName":string,"workflow":ref("workflowSnapshot"),"usage":ref("backgroundTaskUsage"),"summary":string,"error":string,"outputFile":string})
deleg_item=it("delegation",["childRef","label","status","background"],{"childRef":ne,"label":string,"status":ref("itemStatus"),"background":boolean,"summary":string})
items={
 "userMessage":{**it("userMessage",["content"],{"content":{"type":"array","items":dispatch("type",{"text":obj(["type","text"],{"type":{"const":"text"},"text":string}),"image":obj(["type","url"],{"type":{"const":"image"},"url":string}),"localImage":obj(["type","path"],{"type":{"const":"localImage"},"path":string}),"localFile":obj(["type","path"],{"type":{"const":"localFile"},"path":string})})},"clientRequestId":ref("clientTurnRequestId")},False),"additionalProperties":False},
 "agentMessage":it("agentMessage",["text"],{"text":string}),
 "commandExecution":it("commandExecution",["command","cwd","status","approvalStatus"],{"command":string,"cwd":string,"status":ref("itemStatus"),"approvalStatus":ref("approvalStatus"),"aggregatedOutput":string,"exitCode":num,"durationMs":num,"truncation":trunc}),
 "fileChange":it("fileChange",["changes","status","approvalStatus"],{"changes":{"type":"array","items":obj(["path","kind"],{"path":string,"kind":{"enum":["add","delete","update"]},"movePath":string,"diff":string})},"status":ref("itemStatus"),"approvalStatus":ref("approvalStatus")}),
 "webSearch":it("webSearch",["queries","resultText"],{"queries":{"type":"array","items":string,"minItems":1},"resultText":nullable(string)}),
 "webFetch":it("webFetch",["url","prompt","pattern","resultText"],{"url":string,"prompt":nullable(string),"pattern":nullable(string),"resultText":nullable(string)}),
 "imageView":it("imageView",["path"],{"path":string}),
 "fileRead":it("fileRead",["path","status"],{"path":string,"cmd":string,"status":ref("itemStatus")}),
 "search":it("search",["mode","query","status"],{"mode":{"enum":["content","path","list"]},"query":string,"path":string,"cmd":string,"status":ref("itemStatus")}),
 "toolCall":it("toolCall",["tool","status"],{"server":string,"tool":string,"arguments":{"type":"object"},"status":ref("itemStatus"),"error":string,"durationMs":num,"truncation":trunc}),
 "reasoning":it("reasoning",["summary","content"],{"summary":{"type":"array","items":string},"content":{"type":"array","items":string}}),
 "plan":it("plan",["text"],{"text":string}),
 "planSteps":it("planSteps",["steps","status"],{"steps":{"type":"array","items":ref("planStep")},"explanation":string,"status":ref("itemStatus")}),
 "contextCompaction":it("contextCompaction",[],{}),
 "backgroundTask":bg_item,
 "delegation":deleg_item,
 "imageGeneration":it("imageGeneration",["status","prompt","path","error","transparentBackground"],{"status":ref("itemStatus"),"prompt":nullable(string),"path":nullable(string),"result":string,"error":nullable(string),"transparentBackground":boolean}),
 "extension":it("extension",["kind","payload","status","presentation"],{"kind":ref("extensionKind"),"payload":ref("jsonValue"),"status":ref("itemStatus")}),
}
for k,v in items.items(): edefs["item_"+k]=v
edefs["item"]=dispatch("type",{k:{"$ref":"#/$defs/item_"+k} for k in items})
edefs["backgroundTaskItem"]=ref("item_backgroundTask")
edefs["delegationItem"]=ref("item_delegation")
P={"providerThreadId":string}
def ev(req, props): return obj(req, props)
delta_ev=lambda: ev(["providerThreadId","itemId","delta"],{**P,"itemId":string,"delta":string,"parentToolCallId":string})
events={
 "thread/started":(ev([],{}),"thread"),
 "thread/identity":(ev(["providerThreadId"],P),"thread"),
 "turn/started":(ev(["providerThreadId"],{**P,"parentToolCallId":string}),"turn"),
 "turn/completed":(ev(["providerThreadId","status"],{"providerThreadId":nullable(string),"status":ref("turnStatus"),"error":obj(["message"],{"message":string}),"providerCheckpointId":ne}),"turn"),
 "turn/input/accepted":({**ev(["providerThreadId","clientRequestId"],{**P,"clientRequestId":ref("clientTurnRequestId"),"type":True,"threadId":True,"scope":True}),"additionalProperties":False},"turn"),
 "thread/name/updated":(ev(["providerThreadId","threadName"],{**P,"threadName":string}),"thread"),
 "thread/compacted":(ev(["providerThreadId"],P),"turn"),
 "thread/context/cleared":(ev(["providerThreadId"],P),"turn"),
 "item/started":(ev(["providerThreadId","item"],{**P,"item":ref("item")}),"turn"),
 "item/completed":(ev(["providerThreadId","item"],{**P,"item":ref("item")}),"turn"),
 "item/agentMessage/delta":(delta_ev(),"turn"),
 "item/commandExecution/outputDelta":(ev(["providerThreadId","itemId","delta"],{**P,"itemId":string,"delta":string,"reset":boolean,"parentToolCallId":string}),"turn"),
 "item/fileChange/outputDelta":(delta_ev(),"turn"),
 "item/reasoning/summaryTextDelta":(delta_ev(),"turn"),
 "item/reasoning/textDelta":(delta_ev(),"turn"),
 "item/plan/delta":(delta_ev(),"turn"),
 "item/mcpToolCall/progress":(ev(["providerThreadId","itemId"],{**P,"itemId":string,"message":string,"parentToolCallId":string}),"turn"),
 "item/toolCall/progress":(ev(["providerThreadId","itemId"],{**P,"itemId":string,"message":string,"parentToolCallId":string}),"turn"),
 "item/backgroundTask/progress":(ev(["providerThreadId","item"],{**P,"item":ref("item_backgroundTask")}),"thread"),
 "item/backgroundTask/completed":(ev(["providerThreadId","item"],{**P,"item":ref("item_backgroundTask")}),"thread"),
 "item/delegation/progress":(ev(["providerThreadId","item"],{**P,"item":ref("item_delegation")}),"thread"),
 "item/delegation/completed":(ev(["providerThreadId","item"],{**P,"item":ref("item_delegation")}),"thread"),
 "thread/tokenUsage/updated":(ev(["providerThreadId","tokenUsage"],{**P,"tokenUsage":obj(["total","last","modelContextWindow"],{"total":ref("tokenBreakdown"),"last":ref("tokenBreakdown"),"modelContextWindow":nullable(num)})}),"turn"),
 "thread/contextWindowUsage/updated":(ev(["providerThreadId","contextWindowUsage"],{**P,"contextWindowUsage":obj(["usedTokens","modelContextWindow","estimated"],{"usedTokens":nullable(num),"modelContextWindow":nullable(num),"estimated":boolean})}),None),
 "turn/plan/updated":(ev(["providerThreadId","plan"],{**P,"plan":{"type":"array","items":ref("planStep")},"explanation":string}),"turn"),
 "turn/diff/updated":(ev(["providerThreadId"],{**P,"diff":string}),"turn"),
 "provider/error":(ev(["providerThreadId","message"],{**P,"message":string,"detail":string,"willRetry":boolean,"errorInfo":ref("errorInfo")}),None),
 "provider/rateLimits/updated":(ev(["providerThreadId","rateLimits"],{**P,"rateLimits":ref("rateLimits")}),"thread"),
 "thread/extensionState/updated":(ev(["providerThreadId","kind","payload"],{**P,"kind":ref("extensionKind"),"payload":ref("jsonValue")}),"thread"),
 "provider/warning":(ev(["providerThreadId","category"],{**P,"category":ref("warningCategory"),"summary":string,"details":string}),None),
 "provider/modelFallback":(ev(["providerThreadId","originalModel","fallbackModel","reason","message"],{**P,"originalModel":ne,"fallbackModel":ne,"reason":{"enum":["refusal","provider"]},"message":string}),None),
 "provider/unhandled":(ev(["providerThreadId","providerId","rawType","rawEvent"],{**P,"providerId":string,"rawType":string,"rawEvent":ref("providerRawEvent"),"parentToolCallId":string}),None),
 "system/thread/interrupted":(ev(["reason"],{"reason":{"enum":["manual-stop","host-daemon-restarted","provider-turn-idle"]},"cause":{"const":"host-connection-lost"}}),"thread"),
}
table={}
for k,(v,scope) in events.items():
    v=copy.deepcopy(v)
    if scope=="turn": v["properties"]["scope"]=ref("turnScope")
    elif scope=="thread": v["properties"]["scope"]=ref("threadScope")
    table[k]=v
event_schema={
 "$schema":"https://json-schema.org/draft/2020-12/schema",
 "$id":"https://bridgewire.dev/schema/bb-thread-event.schema.json",
 "title":"bb ThreadEvent, as bb's runtime validates it (threadEventSchema)",
 "description":"Every provider event type bb's delta assembler can emit (plus system/thread/interrupted), with bb's required, optional and nullable fields, enums, formats and scope policy (turn-only, thread-only, either). Unknown fields pass except where bb's schema is strict (turn/input/accepted, userMessage items). Checked against the protocol document by tests/bb_schema.rs.",
 "type":"object","required":["type","threadId","scope"],
 "properties":{"type":{"enum":list(events)},"threadId":string,"scope":ref("scope")},
 "allOf":[{"if":{"properties":{"type":{"const":k}},"required":["type"]},"then":table[k]} for k in events],
 "$defs":edefs}
open(ROOT+'/rules/schema/bb-thread-event.schema.json','w').write(json.dumps(event_schema,indent=2,ensure_ascii=True)+"\n")
print("ok")
