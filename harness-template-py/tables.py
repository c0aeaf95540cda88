"""Every tunable knob of the Python starting harness, as plain data.

The rules in `rules.py` read these tables; changing what the harness *says*
or *recognises* means editing this file only. Domains are matched by their
short name (`retail`, `airline`, `dbbench`: the part after the last `/` of
`tau2/retail`); `"*"` matches every domain. Message templates use
`str.format` placeholders, listed next to each.
"""

PROMPT_RULES_TITLE = "## Tool-use rules (runtime harness)"

# (domain, one self-contained line appended as a `- ` bullet)
PROMPT_RULES = [
    ("*", "Call tools only with structured tool calls (the function-calling interface). Never write a tool call as JSON or code in your message text."),
    ("*", "Use the exact tool names from the tool list; there are no other tools."),
    ("retail", "Pass numbers as JSON numbers, not as quoted strings (e.g. 2, not \"2\")."),
    ("airline", "Pass numbers as JSON numbers, not as quoted strings (e.g. 2, not \"2\")."),
    ("retail", "Order ids include the leading '#', e.g. '#W0000000': keep the '#' in every order_id argument."),
    ("*", "If a tool call fails, read the error and change the call; do not repeat an identical call that failed."),
    ("retail", "Before changing an order, look up its current status and items with get_order_details first."),
    ("airline", "Before changing a reservation, look up its current details with get_reservation_details first (and the user's profile with get_user_details for payment methods and membership)."),
    ("dbbench", "Run SQL only through the execute_sql tool, one statement per call; SQL written in your message is not executed."),
    ("dbbench", "This is MySQL: quote table and column names that contain spaces or punctuation with backticks (`Table name`); text in double quotes is a string, not a name."),
    ("dbbench", "Every column is TEXT: compare with quoted values (WHERE `No` = '16'), and CAST(col AS DECIMAL) for numeric order, sums and comparisons."),
    ("dbbench", "Finish with commit_final_answer: answers is a list of strings holding only the values (e.g. [\"12\"] or [\"Paris\", \"Rome\"]); after an INSERT/UPDATE/DELETE, commit once the change is made."),
]

TOOL_HINT_PREFIX = "Policy check:"

# (domain, tool, hint appended to the tool's description)
TOOL_HINTS = [
    ("retail", "cancel_pending_order", "only an order whose status is 'pending' can be cancelled, and the reason must be 'no longer needed' or 'ordered by mistake'; confirm with the user first."),
    ("retail", "exchange_delivered_order_items", "only a 'delivered' order; every new item must be the same product as the one it replaces; collect all items to exchange before calling (it can be called once per order)."),
    ("airline", "cancel_reservation", "allowed within 24 hours of booking, when the airline cancelled a flight, for business cabin, or with travel insurance for a covered reason; never after a flight has been flown."),
    ("dbbench", "commit_final_answer", "answers must be a list of strings with only the values, e.g. [\"12\"]."),
]

# (domain, title, text, keywords): retrieved by keyword overlap with the
# user's first message; at most SKILL_LIMIT per episode, each needing at
# least SKILL_MIN_HITS keyword hits.
SKILLS = [
    ("dbbench", "Answer a question from the table",
     "1. Write one SELECT that answers the question, with backticks around the table and column names from the table information. 2. Run it with execute_sql and read the rows. 3. Every column is TEXT: for counts, sums, averages, minimum/maximum and ordering by a number use CAST(col AS DECIMAL). 4. Commit only the values: commit_final_answer with answers such as [\"12\"] (one string per value).",
     "what which who how many much number count total sum average avg highest lowest most least largest smallest first last name when where question table"),
    ("dbbench", "Change the table (INSERT / UPDATE / DELETE)",
     "1. Write the statement with backticks around names and every value quoted as a string (the columns are TEXT). 2. Run it once with execute_sql (an empty result [] means it worked). 3. Do not run it twice. 4. Then call commit_final_answer (the answer text does not matter).",
     "insert add added adding update modify change set record entry row new delete remove"),
    ("retail", "Cancel a pending order",
     "1. Authenticate the user (find_user_id_by_email or find_user_id_by_name_zip). 2. get_order_details: only a 'pending' order can be cancelled. 3. Ask for the reason ('no longer needed' or 'ordered by mistake') and explicit confirmation. 4. cancel_pending_order once.",
     "cancel cancellation cancelled order mistake longer need needed refund"),
    ("retail", "Exchange or return delivered items",
     "1. Authenticate the user. 2. get_order_details: the order must be 'delivered'. 3. For an exchange, get_product_details and pick an available item of the same product. 4. Collect every item first, confirm, then call the tool once.",
     "exchange return returned swap replace delivered item items size color different"),
    ("airline", "Change or cancel a reservation",
     "1. get_user_details and get_reservation_details. 2. Basic economy flights cannot be changed; cancellation needs one of the policy's conditions. 3. State the change and its cost, get an explicit yes, then call the tool once.",
     "cancel change modify reservation flight flights booking book date cabin upgrade baggage bags"),
]
SKILL_LIMIT = 2
SKILL_MIN_HITS = 2

# (domain, alias the model uses, the tool's real name)
TOOL_ALIASES = [
    ("dbbench", "run_sql", "execute_sql"),
    ("dbbench", "sql", "execute_sql"),
    ("dbbench", "execute_query", "execute_sql"),
    ("dbbench", "query", "execute_sql"),
    ("dbbench", "submit_answer", "commit_final_answer"),
    ("dbbench", "final_answer", "commit_final_answer"),
    ("retail", "get_order", "get_order_details"),
    ("retail", "get_order_info", "get_order_details"),
    ("retail", "cancel_order", "cancel_pending_order"),
    ("retail", "get_product", "get_product_details"),
    ("airline", "get_reservation", "get_reservation_details"),
    ("airline", "cancel_booking", "cancel_reservation"),
]

# (domain, argument name, prefix every value must carry)
ID_PREFIXES = [("retail", "order_id", "#")]

# (domain, argument name): numbers sent as strings are sent as numbers
NUMERIC_ARGS = [("airline", "amount"), ("retail", "amount")]

# Keys of a call written as a JSON object in text.
TEXT_CALL_NAME_KEYS = ["name", "tool", "tool_name", "function", "function_name"]
TEXT_CALL_ARGUMENT_KEYS = ["arguments", "args", "parameters", "params", "input"]
TEXT_CALL_TAGS = ["tool_call", "function_call", "tool_use", "call"]

# (domain, fence language, tool, argument): a fenced code block in text is
# run as this tool with the block as this argument.
CODE_RESCUE = [("dbbench", "sql", "execute_sql", "query")]

# Regulation: the same failed call this many times gets a note; an error
# streak this long gets a recovery message.
REPEATED_FAILURE_NOTE_AT = 2
ERROR_STREAK_INJECT_AT = 3

MESSAGES = {
    # {name} {tools}
    "unknown_tool": "There is no tool named `{name}`. Use the exact tool names from the tool list: {tools}.",
    # {error}
    "bad_arguments": "The arguments of this call are not a JSON object ({error}). Call the tool again with a structured tool call whose arguments are a JSON object.",
    # {name} {times}
    "repeated_failure": "This exact call to {name} has now failed {times} times. Do not repeat it: read the error and change the arguments or the approach.",
    # {count}
    "error_streak": "The last {count} tool calls failed. Stop and re-read the tool list and the policy; check your assumptions with a read-only lookup before the next change.",
    # {answers}
    "answers_not_list": "commit_final_answer needs `answers` as a list of strings, e.g. [\"12\"]; got {answers}.",
}
