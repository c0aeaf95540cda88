#!/usr/bin/env python3
"""Records what the original DBBench client shows the agent, as test vectors.

The original (AgentBench `src/server/tasks/dbbench/interaction.py`) runs each
statement with `mysql.connector.aio` (requirement `mysql-connector-python~=9.3`):
`cursor.execute(sql)`, `fetchall()` when `cursor.with_rows`, `str(rows)`, commit;
on an exception `str(e)` and a rollback; then cuts the text at 800 characters and
appends `[TRUNCATED]`. The table is made as its `_build_init_sql` does: every column
`TEXT`, every cell inserted as the parameter `str(cell)`.

This script re-does those steps (no AgentBench code is used) with the real connector
against a MariaDB configured like the Ecdysis private server, for one DBBench task's
table and a battery of statements, and writes `render_vectors.json`. The schema name
in outputs is replaced by `{schema}`. The Rust client must print the same text.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install 'mysql-connector-python~=9.3'
    /tmp/venv/bin/python tests/dbbench/gen_render_vectors.py /path/to/mariadb.sock
"""
import asyncio
import json
import sys
from pathlib import Path

import mysql.connector
import mysql.connector.aio as aio

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "dbbench_vectors"
TASK_INDEX = 0  # standard.jsonl, line 1

STATEMENTS = [
    "SELECT * FROM `Jiu-Jitsu Championships Results` LIMIT 3",
    "SELECT Notes FROM `Jiu-Jitsu Championships Results` WHERE Method = 'decision'",
    "SELECT Notes FROM \"Jiu-Jitsu Championships Results\" WHERE Method = 'Decision';",
    "SELECT COUNT(*) FROM `Jiu-Jitsu Championships Results`",
    "SELECT Opponent FROM `Jiu-Jitsu Championships Results` WHERE Opponent LIKE '%Lee%' ORDER BY Opponent",
    "SELECT * FROM `Jiu-Jitsu Championships Results`",
    "SELECT 1, 1.5, 1e3, NULL, 'a', TRUE, 2/3, 10 DIV 3, -7, 18446744073709551615",
    "SELECT CAST(1.50 AS DECIMAL(5,2)), SUM('1.5'), AVG(2), SUM(3), MAX('x'), MIN(2.5)",
    "SELECT 'it''s', 'say \"hi\"', 'both '' and \"', 'tab\\there', 'nl\\nx', 'back\\\\slash'",
    "SELECT 'caf\u00e9' = 'CAFE', 'a' = 'a ', 'x\u00a0y', 'zero\u200bwidth', '\U0001F600'",
    "SELECT CAST('2020-01-02' AS DATE), CAST('2020-01-02 03:04:05' AS DATETIME), CAST('2020-01-02 03:04:05.250' AS DATETIME(3))",
    "SELECT CAST('10:11:12' AS TIME), CAST('-01:00:00' AS TIME), CAST('838:59:59' AS TIME)",
    "SELECT MD5('a'), CAST('x' AS BINARY), UNHEX('41'), X'00FF'",
    "SELECT 1 FROM DUAL WHERE 0",
    "SELECT NULL",
    "SELECT ''",
    "INSERT INTO `Jiu-Jitsu Championships Results` VALUES ('Win', 'X', 'Y', 'Z', 'W')",
    "UPDATE `Jiu-Jitsu Championships Results` SET Notes = 'n' WHERE Opponent = 'X'",
    "DELETE FROM `Jiu-Jitsu Championships Results` WHERE Opponent = 'X'",
    "SELEC 1",
    "SELECT * FROM nope",
    "SELECT nope FROM `Jiu-Jitsu Championships Results`",
    "SELECT Result, COUNT(*) FROM `Jiu-Jitsu Championships Results` GROUP BY Result ORDER BY Result",
    "SELECT Result, Opponent FROM `Jiu-Jitsu Championships Results` GROUP BY Result",
    "SELECT 1/0",
    "SHOW TABLES",
    "DESCRIBE `Jiu-Jitsu Championships Results`",
    "SELECT COUNT(*) FROM `Jiu-Jitsu Championships Results` WHERE Opponent = \"Jane Doe\"",
    "SELECT REPEAT('ab', 600)",
    "SELECT GROUP_CONCAT(Opponent) FROM `Jiu-Jitsu Championships Results`",
    "SELECT 1e308 * 10",
    "SELECT CAST('12abc' AS SIGNED)",
    "CREATE TABLE t2 (a INT, b FLOAT, c DOUBLE, d YEAR, e BIT(3), f ENUM('x','y'), g SET('p','q'))",
    "INSERT INTO t2 VALUES (1, 1.1, 2.2, 2001, b'101', 'x', 'p,q')",
    "SELECT * FROM t2",
    "",
    "   ",
    # Last: after a multi-statement call the connector's next execute fails with
    # "Unread result found" (its second result set is never read).
    "SELECT 1; SELECT 2",
]


def init_sql(entry):
    table = entry["table"]
    name = table["table_name"]
    cols = table["table_info"]["columns"]
    columns = ",".join(f"`{c['name']}` TEXT" for c in cols)
    names = ",".join(f"`{c['name']}`" for c in cols)
    rows = table["table_info"]["rows"]
    items = ",".join("(" + ",".join(["%s"] * len(r)) + ")" for r in rows)
    data = tuple(str(c) for r in rows for c in r)
    return [(f"CREATE TABLE IF NOT EXISTS `{name}` ({columns})", ()),
            (f"INSERT INTO `{name}` ({names}) VALUES {items}", data)]


async def execute(conn, sql):
    try:
        async with await conn.cursor() as cursor:
            results = []
            await cursor.execute(sql, ())
            if cursor.with_rows:
                rows = await cursor.fetchall()
                results.extend(rows)
            result_str = str(results)
        await conn.commit()
    except Exception as e:  # noqa: BLE001 - the original prints any error
        result_str = str(e)
        try:
            await conn.rollback()
        except Exception:  # noqa: BLE001
            pass
    if len(result_str) > 800:
        result_str = result_str[:800] + "[TRUNCATED]"
    return result_str


async def main(sock):
    entry = json.loads((ROOT / "data/dbbench/standard.jsonl").read_text().splitlines()[TASK_INDEX])
    admin = await aio.connect(unix_socket=sock, user="root")
    async with await admin.cursor() as c:
        await c.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        await c.execute(f"CREATE DATABASE {SCHEMA}")
    await admin.close()
    conn = await aio.connect(unix_socket=sock, user="root", database=SCHEMA)
    # Against MySQL 8 the connector's default collation is utf8mb4_0900_ai_ci (NO PAD,
    # accent- and case-insensitive); the Ecdysis client sets its MariaDB stand-in.
    async with await conn.cursor() as c:
        await c.execute("SET NAMES utf8mb4 COLLATE utf8mb4_uca1400_nopad_ai_ci")
    async with await conn.cursor() as c:
        for sql, data in init_sql(entry):
            await c.execute(sql, data)
    await conn.commit()
    out = []
    for sql in STATEMENTS:
        printed = await execute(conn, sql)
        out.append({"sql": sql, "printed": printed.replace(SCHEMA, "{schema}")})
    await conn.close()
    doc = {"connector": mysql.connector.__version__, "task_index": TASK_INDEX, "vectors": out}
    path = ROOT / "tests/dbbench/render_vectors.json"
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(out)} vectors -> {path}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
