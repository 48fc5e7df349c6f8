"""Drives the team server's MCP endpoint with the official Python MCP SDK client over the
Streamable HTTP transport, as a member's agent would.

Usage: python mcp_http_client.py URL TOKEN QUERY
Prints a JSON report: the tools, the search's hits (member, project, level), a session read,
the projects, and the answers to a bad call. Exits non-zero when the session cannot start.
"""
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError


async def main(url, token, query):
    report = {}
    headers = {"Authorization": f"Bearer {token}"}
    async with streamablehttp_client(url, headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            report["server"] = init.serverInfo.name
            report["tools"] = sorted(t.name for t in (await session.list_tools()).tools)

            async def call(name, args):
                try:
                    res = await session.call_tool(name, args)
                except McpError as e:
                    return True, str(e)
                text = res.content[0].text
                return res.isError, (json.loads(text) if not res.isError else text)

            err, found = await call("search_history", {"query": query, "limit": 10})
            report["search_error"] = err
            report["hits"] = [] if err else [
                {"member": h["member"], "project": h["project"], "level": h["level"], "session_id": h["session_id"]}
                for h in found["results"]
            ]
            if report["hits"]:
                err, page = await call("get_session", {"session_id": report["hits"][0]["session_id"], "limit": 3})
                report["session_items"] = None if err else len(page["items"])
            err, projects = await call("list_projects", {})
            report["projects"] = None if err else [p["project"] for p in projects["projects"]]
            err, bad = await call("search_history", {"query": "x", "level": "paragraphs"})
            report["bad_call"] = bad if err else None
            err, guessed = await call("get_session", {"session_id": "not-a-session-of-yours"})
            report["guessed"] = guessed if err else None
    print(json.dumps(report))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
