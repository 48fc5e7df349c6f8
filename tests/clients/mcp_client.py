"""Drives `memex mcp` with the official Python MCP SDK client over stdio.

Usage: python mcp_client.py MEMEX_BINARY HOME
Checks initialize, the tool list, one call of every tool and a bad call; prints a JSON report
and exits non-zero on the first failed check.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


async def main(binary, home):
    params = StdioServerParameters(command=binary, args=["mcp"], env={"HOME": home, "PATH": "/usr/bin:/bin"})
    report = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check(init.serverInfo.name == "memex", f"server name {init.serverInfo.name}")
            tools = sorted(t.name for t in (await session.list_tools()).tools)
            check(tools == ["get_recent_sessions", "get_session", "list_projects", "search_history", "usage_report"], f"tools {tools}")
            report["tools"] = tools

            async def call(name, args):
                # Invalid arguments are JSON-RPC errors (invalid params), raised by the SDK.
                try:
                    res = await session.call_tool(name, args)
                except McpError as e:
                    return True, str(e)
                text = res.content[0].text
                return res.isError, (json.loads(text) if not res.isError else text)

            err, found = await call("search_history", {"query": "timezone", "limit": 3, "level": "all"})
            check(not err and found["results"], f"search_history: {found}")
            check(all("level" in r and "match" in r for r in found["results"]), "search_history labels")
            sid = found["results"][0]["session_id"]
            err, page = await call("get_session", {"session_id": sid, "limit": 2})
            check(not err and len(page["messages"]) <= 2, f"get_session: {page}")
            err, recent = await call("get_recent_sessions", {"limit": 2})
            check(not err and len(recent["sessions"]) == 2, f"get_recent_sessions: {recent}")
            err, projects = await call("list_projects", {})
            check(not err and projects["projects"], f"list_projects: {projects}")
            err, bad = await call("search_history", {"query": "x", "level": "paragraphs"})
            check(err and "level" in bad, f"bad call: {bad}")
            # The server carries on after a bad call.
            err, again = await call("search_history", {"query": "timezone", "limit": 1})
            check(not err, f"after the bad call: {again}")
            err, usage = await call("usage_report", {"report": "monthly", "timezone": "UTC"})
            check(not err and usage["monthly"] and usage["totals"]["totalCost"] > 0, f"usage_report: {usage}")
            err, bad_usage = await call("usage_report", {"report": "hourly"})
            check(err and "report" in bad_usage, f"bad usage_report: {bad_usage}")
            report.update(search_mode=found["mode"], first_session=sid, bad_call=bad,
                          usage_months=len(usage["monthly"]), usage_cost=usage["totals"]["totalCost"])
    print(json.dumps(report))


asyncio.run(main(sys.argv[1], sys.argv[2]))
