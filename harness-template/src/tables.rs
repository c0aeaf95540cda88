//! Every tunable knob of the harness, as plain data.
//!
//! The rule modules (`contract/`, `skills/`, `realize/`, `regulate/`) hold
//! the logic and read these tables; changing what the harness *says* or
//! *recognises* means editing this file only. Each table is a `static` slice
//! of a small struct with `&'static str` / number fields, so a program can
//! append, delete or rewrite entries textually (one entry per line or per
//! brace block, no computed values).
//!
//! Domains are matched by their short name (`"airline"`, `"retail"`,
//! `"telecom"`, `"dbbench"`, `"os"`: the
//! part after the last `/` of `tau2/airline`); `"*"` matches every domain.
//!
//! Message templates use `{name}` placeholders, filled by
//! [`crate::text::fill`]; a placeholder without a value stays as written.
//! The placeholders each template receives are listed next to it.

// ---------------------------------------------------------------------------
// Environment contract
// ---------------------------------------------------------------------------

/// A rule appended to the system prompt (environment contract).
pub struct PromptRule {
    /// Short domain name or `"*"`.
    pub domain: &'static str,
    /// One self-contained line, appended as a `- ` bullet.
    pub text: &'static str,
}

/// Title of the block of [`PROMPT_RULES`] appended to the system prompt.
pub const PROMPT_RULES_TITLE: &str = "## Tool-use rules (runtime harness)";

/// Interface rules stated once in the system prompt: the systematic slips
/// the realize layer cannot always repair on its own (or that cost a turn
/// when it has to). Written so that a model reads them as instructions.
pub static PROMPT_RULES: &[PromptRule] = &[
    PromptRule {
        domain: "*",
        text: "Call tools only with structured tool calls (the function-calling interface). Never write a tool call as JSON or code in your message text.",
    },
    PromptRule {
        domain: "*",
        text: "Use the exact tool names from the tool list; there are no other tools.",
    },
    // Not for dbbench, whose answers are strings.
    PromptRule {
        domain: "retail",
        text: "Pass numbers as JSON numbers, not as quoted strings (e.g. 2, not \"2\").",
    },
    PromptRule {
        domain: "airline",
        text: "Pass numbers as JSON numbers, not as quoted strings (e.g. 2, not \"2\").",
    },
    PromptRule {
        domain: "retail",
        text: "Order ids include the leading '#', e.g. '#W0000000': keep the '#' in every order_id argument.",
    },
    PromptRule {
        domain: "*",
        text: "If a tool call fails, read the error and change the call; do not repeat an identical call that failed.",
    },
    PromptRule {
        domain: "retail",
        text: "Before changing an order, look up its current status and items with get_order_details first.",
    },
    PromptRule {
        domain: "airline",
        text: "Before changing a reservation, look up its current details with get_reservation_details first (and the user's profile with get_user_details for payment methods and membership).",
    },
    // ----- telecom (τ² telecom: the user acts on their own phone)
    PromptRule {
        domain: "telecom",
        text: "You cannot see or operate the customer's phone. To check or change anything on it (status bar, airplane mode, mobile data, roaming, SIM, APN, VPN, apps), ask the user to do it and to tell you what they see; ask for one step at a time and wait for the answer.",
    },
    PromptRule {
        domain: "telecom",
        text: "Identify the line before changing it: get_customer_by_phone with the number the user gives (or get_customer_by_id / get_customer_by_name), then get_details_by_id for the line, its plan, roaming and data usage.",
    },
    PromptRule {
        domain: "telecom",
        text: "Pass numbers as JSON numbers, not as quoted strings (e.g. 2.0, not \"2.0\").",
    },
    PromptRule {
        domain: "telecom",
        text: "A fix is done only when the user confirms the symptom is gone (e.g. a speed test now says Excellent, or an MMS can be sent); until then, go on with the next check.",
    },
    // ----- dbbench (AgentBench DBBench: MySQL 8, every column TEXT)
    PromptRule {
        domain: "dbbench",
        text: "Run SQL only through the execute_sql tool, one statement per call; SQL written in your message is not executed.",
    },
    PromptRule {
        domain: "dbbench",
        text: "This is MySQL: quote table and column names that contain spaces or punctuation with backticks (`Table name`); text in double quotes is a string, not a name.",
    },
    PromptRule {
        domain: "dbbench",
        text: "Every column is TEXT: compare with quoted values (WHERE `No` = '16'), and CAST(col AS DECIMAL) for numeric order, sums and comparisons.",
    },
    PromptRule {
        domain: "dbbench",
        text: "Finish with commit_final_answer: answers is a list of strings holding only the values (e.g. [\"12\"] or [\"Paris\", \"Rome\"]); after an INSERT/UPDATE/DELETE, commit once the change is made.",
    },
    // ----- os (AgentBench OS interaction: a Linux shell, 8 turns in all)
    PromptRule {
        domain: "os",
        text: "Run commands only through the bash_action tool (its `script` argument), one tool call per turn; a command written in your message is not run.",
    },
    PromptRule {
        domain: "os",
        text: "Commands must not wait for input: no editors (vi, nano), pagers (less, more, man) or screens (top without -b, watch); use cat, head, grep, sed -i, or echo with > and >> instead.",
    },
    PromptRule {
        domain: "os",
        text: "Output longer than 800 characters is cut: print only what you need (wc -l to count, grep to filter, head to sample).",
    },
    PromptRule {
        domain: "os",
        text: "You have 8 turns in all. To answer a question, call answer_action with only the value (e.g. 12, a path, a name), no sentence; after an operation (create, change, delete), check it once, then call finish_action.",
    },
];

/// Text appended to one tool's description (environment contract). Only
/// for tools where the policy is easy to violate: hints on read-only
/// lookups made agents over-scan in the reference harness.
pub struct ToolHint {
    /// Short domain name or `"*"`.
    pub domain: &'static str,
    /// Tool name, exactly as the environment declares it.
    pub tool: &'static str,
    /// The text appended to the description (after a blank line).
    pub hint: &'static str,
}

/// Prefix of every appended hint.
pub const TOOL_HINT_PREFIX: &str = "Policy check:";

pub static TOOL_HINTS: &[ToolHint] = &[
    // ----- dbbench
    ToolHint {
        domain: "dbbench",
        tool: "execute_sql",
        hint: "one MySQL statement in `query`; backticks around names with spaces; every column is TEXT, so quote compared values and CAST for numbers. The reply is the raw result rows, cut at 800 characters.",
    },
    ToolHint {
        domain: "dbbench",
        tool: "commit_final_answer",
        hint: "ends the task at once: call it only when the answer is known (or the change is made). answers is a list of strings with the bare values, no sentence.",
    },
    // ----- os
    ToolHint {
        domain: "os",
        tool: "bash_action",
        hint: "one non-interactive bash script in `script`. The shell persists across calls (cd and variables carry over); the reply is the terminal output, cut at 800 characters; a command still running at the timeout is interrupted.",
    },
    ToolHint {
        domain: "os",
        tool: "answer_action",
        hint: "ends the task at once: `answer` is only the value asked for, as a string (e.g. \"12\"), no sentence or unit.",
    },
    ToolHint {
        domain: "os",
        tool: "finish_action",
        hint: "ends the task at once: call it when the requested operation is done and checked; a question is answered with answer_action instead.",
    },
    // ----- airline
    ToolHint {
        domain: "airline",
        tool: "book_reservation",
        hint: "every flight must have status 'available' on its date, one cabin for all flights, at most five passengers. Payment: only methods from the user's profile, at most one travel certificate, one credit card and three gift cards, and the amounts must add up exactly to (sum of the cabin prices x passengers) + $30 x passengers with insurance + $50 x non-free bags. Free checked bags per passenger, by the booking user's membership (basic economy / economy / business): regular 0/1/2, silver 1/2/3, gold 2/3/4; nonfree_baggages counts only the bags beyond that.",
    },
    ToolHint {
        domain: "airline",
        tool: "cancel_reservation",
        hint: "look up the reservation first. Cancel only if at least one holds: booked within the last 24 hours, a flight was cancelled by the airline, the cabin is business, or the user has travel insurance and the reason is covered (health or weather). Otherwise refuse.",
    },
    ToolHint {
        domain: "airline",
        tool: "update_reservation_flights",
        hint: "look up the reservation first. Basic economy flights cannot be changed (their cabin can be upgraded while keeping the same flights). Keep origin, destination and trip type; list every segment of the whole new itinerary; new flights must have status 'available'. Pay with one gift card or credit card from the profile (not a certificate). The cabin cannot change once a flight has been flown.",
    },
    ToolHint {
        domain: "airline",
        tool: "update_reservation_baggages",
        hint: "bags can be added, never removed (total_baggages and nonfree_baggages never go down); each non-free bag costs $50, paid with a gift card or credit card from the profile.",
    },
    ToolHint {
        domain: "airline",
        tool: "update_reservation_passengers",
        hint: "the number of passengers can never change.",
    },
    ToolHint {
        domain: "airline",
        tool: "send_certificate",
        hint: "only when the user asks for compensation, after confirming the facts, and only for silver/gold members, users with travel insurance or business flyers: $100 x passengers for a flight cancelled by the airline, $50 x passengers for a delayed flight after the reservation was changed or cancelled.",
    },
    // ----- retail
    ToolHint {
        domain: "retail",
        tool: "cancel_pending_order",
        hint: "look up the order first: only orders whose status is exactly 'pending'. The reason must be 'no longer needed' or 'ordered by mistake'. Keep the leading '#' of the order id.",
    },
    ToolHint {
        domain: "retail",
        tool: "modify_pending_order_items",
        hint: "only for status 'pending', and only once per order: collect every item to change before calling. item_ids are item ids from this order (not product ids); each new item must be an available variant of the same product. Keep the leading '#' of the order id.",
    },
    ToolHint {
        domain: "retail",
        tool: "modify_pending_order_address",
        hint: "only for status 'pending' (not after the order's items were modified). Keep the leading '#' of the order id.",
    },
    ToolHint {
        domain: "retail",
        tool: "modify_pending_order_payment",
        hint: "only for status 'pending' (not after the order's items were modified); the new payment method must differ from the current one, and a gift card must cover the order total. Keep the leading '#' of the order id.",
    },
    ToolHint {
        domain: "retail",
        tool: "exchange_delivered_order_items",
        hint: "only for status 'delivered', and one exchange or return per order: collect every item first. item_ids are item ids from this order (not product ids); each new item must be an available variant of the same product. A gift card must cover the price difference. Keep the leading '#' of the order id.",
    },
    ToolHint {
        domain: "retail",
        tool: "return_delivered_order_items",
        hint: "only for status 'delivered', one exchange or return per order. The refund goes to the original payment method or to an existing gift card. Keep the leading '#' of the order id.",
    },
];

// ---------------------------------------------------------------------------
// Procedural skills
// ---------------------------------------------------------------------------

/// One procedure of the skill library, retrieved by BM25 over the user's
/// opening message.
pub struct Skill {
    /// Short domain name or `"*"`.
    pub domain: &'static str,
    /// Title (the guidance block's heading, recorded in the trajectory).
    pub title: &'static str,
    /// What the model reads.
    pub text: &'static str,
    /// Space-separated words the opening message of a matching request
    /// tends to contain (indexed together with the title).
    pub keywords: &'static str,
}

pub static SKILLS: &[Skill] = &[
    // ----- dbbench
    Skill {
        domain: "dbbench",
        title: "Answer a question from the table",
        text: "1. Write one SELECT that answers the question, with backticks around the table and column names from the table information. 2. Run it with execute_sql and read the rows. 3. Every column is TEXT: for counts, sums, averages, minimum/maximum and ordering by a number use CAST(col AS DECIMAL). 4. Commit only the values: commit_final_answer with answers such as [\"12\"] (one string per value).",
        keywords: "what which who how many much number count total sum average avg highest lowest most least largest smallest first last name when where question table",
    },
    Skill {
        domain: "dbbench",
        title: "Change the table (INSERT / UPDATE / DELETE)",
        text: "1. Write the statement with backticks around names and every value quoted as a string (the columns are TEXT), e.g. INSERT INTO `T` (`A`, `B`) VALUES ('1', 'x') or UPDATE `T` SET `B` = 'y' WHERE `A` = '1'. 2. Run it once with execute_sql (an empty result [] means it worked). 3. Do not run it twice. 4. Then call commit_final_answer (the answer text does not matter).",
        keywords: "insert add added adding update modify change set record entry row new delete remove",
    },
    // ----- os
    Skill {
        domain: "os",
        title: "Count files or directories",
        text: "1. Count with find, not by reading a listing: find DIR -type f | wc -l (-maxdepth 1 for 'directly in', -name '*.txt' for one kind, -type d for directories). 2. Hidden files start with a dot: find and ls -A include them, plain ls does not. 3. Answer with answer_action and only the number.",
        keywords: "how many files directories directory folders folder count number hidden subdirectories extension recursively inside under contain",
    },
    Skill {
        domain: "os",
        title: "Count lines, words or matches in files",
        text: "1. Lines: wc -l < FILE; matching lines: grep -c PATTERN FILE; words: wc -w < FILE; distinct values: sort -u | wc -l. 2. A column: awk -F, '{print $2}' FILE; a sum: awk '{s+=$1} END {print s}'. 3. Answer with answer_action and only the value.",
        keywords: "lines line words word occurrences appear appears content text string pattern sum total column csv log logs entries",
    },
    Skill {
        domain: "os",
        title: "Answer about users, groups or processes",
        text: "1. Users: getent passwd | cut -d: -f1; groups: getent group; one user's groups: id -nG USER. 2. Processes: ps -eo pid,user,comm (filter with grep -v grep), count with wc -l. 3. Answer with answer_action and only the value.",
        keywords: "user users group groups process processes running pid owner login account member members memory cpu",
    },
    Skill {
        domain: "os",
        title: "Change files, permissions or users",
        text: "1. Do it with non-interactive commands: mkdir -p, touch, echo 'text' > FILE, chmod, chown, useradd -m, usermod -aG, ln -s. 2. Check it once (ls -l, stat, id USER, cat FILE). 3. Call finish_action; there is no answer to give.",
        keywords: "create make set change permission permissions chmod chown owner write add executable readable writable link move copy rename delete remove",
    },
    // ----- telecom (the user does every phone step; the agent asks)
    Skill {
        domain: "telecom",
        title: "No service on the phone",
        text: "Ask the user, one step at a time: 1. Check the status bar; if airplane mode is on, turn it off. 2. Check the SIM status: if missing, reseat the SIM card; if locked, transfer to technical support. 3. Check the APN settings: if incorrect, reset them and then reboot the phone. 4. Meanwhile look up the line (get_customer_by_phone, get_details_by_id): a suspended line has no service; resume it only if the policy allows (e.g. the overdue bill is paid), else transfer. 5. Have the user check the status bar again.",
        keywords: "service signal bars no service emergency calls call sim network searching cannot call phone dead",
    },
    Skill {
        domain: "telecom",
        title: "Mobile data not working or slow",
        text: "Ask the user, one step at a time, and re-run the speed test after each fix: 1. Run a speed test. 2. Airplane mode off and mobile data on (check the network status). 3. Abroad: data roaming on the phone, and the line roaming-enabled on your side (get_details_by_id, enable_roaming per the policy). 4. Data saver mode off. 5. A VPN that is connected with poor performance: disconnect it. 6. Network mode 2G or 3G: set it to 4g_5g_preferred. 7. Data used up (get_data_usage against the plan's limit): offer refuel_data or a plan change per the policy. Stop when the speed test says Excellent.",
        keywords: "data internet mobile slow speed browse browsing web roaming abroad travel traveling vpn connection apps loading",
    },
    Skill {
        domain: "telecom",
        title: "Picture messages (MMS) fail",
        text: "MMS needs service and mobile data first (fix those as for no service / no data). Then ask the user, one step at a time: 1. Network mode must not be 2G: set 4g_5g_preferred. 2. APN settings: if the MMSC URL is missing, reset the APN settings and reboot. 3. Wi-Fi calling on: turn it off. 4. The messaging app needs the storage and sms permissions: grant the missing ones. 5. Check whether an MMS can be sent now.",
        keywords: "mms picture pictures photo photos image video message messages messaging text send sending multimedia",
    },
    // ----- retail
    Skill {
        domain: "retail",
        title: "Exchange or modify items in one call",
        text: "1. Authenticate the user (find_user_id_by_email, or find_user_id_by_name_zip) and look up the order with get_order_details first. 2. Delivered orders use exchange_delivered_order_items; pending orders use modify_pending_order_items. Each can be called only once per order, so ask the user to list every item to change before calling. 3. For each item, find the new variant in get_product_details (same product, available, the requested options). 4. State the items, the price difference and the payment method, get an explicit yes, then make one call with all items.",
        keywords: "exchange exchanging swap switch change modify replace different size color colour option options version variant item items instead bigger smaller",
    },
    Skill {
        domain: "retail",
        title: "Return delivered items",
        text: "1. Authenticate the user and look up the order with get_order_details first: only delivered orders can be returned, once per order. 2. Ask for every item to return before calling. 3. The refund goes to the original payment method or to an existing gift card. 4. List the items and the refund method, get an explicit yes, then call return_delivered_order_items once.",
        keywords: "return returning refund money back send back delivered item items unwanted broken",
    },
    Skill {
        domain: "retail",
        title: "Cancel a pending order",
        text: "1. Authenticate the user and look up the order with get_order_details first: only status 'pending' can be cancelled. 2. The reason must be 'no longer needed' or 'ordered by mistake'. 3. State the order and reason, get an explicit yes, then call cancel_pending_order.",
        keywords: "cancel cancelling cancellation pending mistake mistakenly longer needed",
    },
    Skill {
        domain: "retail",
        title: "Change an address or payment method",
        text: "1. Authenticate the user. 2. For an order's shipping address or payment, look up the order first: only status 'pending' can be changed. For the user's default address use modify_user_address. 3. Confirm the full new address (or the new payment method) with the user before calling.",
        keywords: "address addresses shipping ship move moved moving street apartment typed payment",
    },
    // ----- airline
    Skill {
        domain: "airline",
        title: "Cancel a reservation",
        text: "1. Get the user id and the reservation id, and look up the reservation with get_reservation_details first. 2. Ask for the reason. 3. Cancel only if one holds: booked within the last 24 hours, a flight was cancelled by the airline, business cabin, or travel insurance with a covered reason (health or weather). 4. Confirm, then call cancel_reservation; the refund goes to the original payment methods.",
        keywords: "cancel cancelling cancellation refund reservation trip booking",
    },
    Skill {
        domain: "airline",
        title: "Change flights or cabin",
        text: "1. Get the user id and reservation id and look up the reservation first. 2. Basic economy flights cannot be changed, but the cabin can be upgraded keeping the same flights. 3. Keep origin, destination and trip type; search flights with search_direct_flight / search_onestop_flight; pass every segment of the new itinerary. 4. Pay or refund the difference with one gift card or credit card from the profile; confirm, then call update_reservation_flights.",
        keywords: "change changing modify reschedule flight flights date dates earlier later cabin upgrade economy business class",
    },
    Skill {
        domain: "airline",
        title: "Book a new reservation",
        text: "1. Get the user id and look up the profile (membership, payment methods, saved passengers). 2. Ask trip type, origin, destination, dates, cabin and passengers (at most five), and whether they want insurance ($30 per passenger). 3. Search available flights. 4. Free bags per passenger by membership (regular 0/1/2, silver 1/2/3, gold 2/3/4 for basic economy/economy/business), $50 per extra bag. 5. Compute the total with calculate, split the payment over at most one certificate, one credit card and three gift cards, confirm, then call book_reservation.",
        keywords: "book booking new reservation ticket tickets fly flying flight one way round trip travel",
    },
    Skill {
        domain: "airline",
        title: "Add checked bags",
        text: "1. Look up the reservation first. 2. Bags can only be added: total_baggages and nonfree_baggages never go down. 3. Each non-free bag costs $50, paid with a gift card or credit card from the profile. 4. Confirm, then call update_reservation_baggages.",
        keywords: "bag bags baggage baggages luggage checked suitcase suitcases",
    },
    Skill {
        domain: "airline",
        title: "Compensation after a delay or cancellation",
        text: "1. Only if the user asks. 2. Confirm the facts first (reservation details, flight status). 3. Only silver/gold members, users with insurance, or business flyers qualify. 4. Cancelled flight: a certificate of $100 x passengers. Delayed flight: $50 x passengers, only after changing or cancelling the reservation as the user wants.",
        keywords: "delay delayed late cancelled compensation compensate certificate complain complaint voucher",
    },
];

/// BM25 parameters and selection limits of the skills layer.
pub struct SkillRetrieval {
    /// Term-frequency saturation.
    pub k1: f64,
    /// Length normalisation.
    pub b: f64,
    /// Minimum BM25 score for a skill to be injected.
    pub min_score: f64,
    /// A second skill is kept only if its score is at least this fraction
    /// of the best one.
    pub second_fraction: f64,
    /// Most skills injected per episode.
    pub max_skills: usize,
}

pub static SKILL_RETRIEVAL: SkillRetrieval = SkillRetrieval {
    k1: 1.2,
    b: 0.5,
    min_score: 1.0,
    second_fraction: 0.7,
    max_skills: 2,
};

/// Words ignored by the skill retrieval.
pub static STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "for", "from", "had",
    "have", "hi", "hello", "i", "i'm", "if", "in", "is", "it", "my", "me", "of", "on", "or",
    "please", "so", "that", "the", "this", "to", "want", "was", "with", "would", "you", "your",
    "like", "am", "id", "user", "name", "help", "need",
];

// ---------------------------------------------------------------------------
// Action realization: interface normalisation
// ---------------------------------------------------------------------------

/// A wrong tool name models use for a real tool. An unknown tool called by
/// an alias runs as the real tool (if the real tool exists).
pub struct ToolAlias {
    /// Short domain name or `"*"`.
    pub domain: &'static str,
    /// The wrong name.
    pub alias: &'static str,
    /// The real tool it means.
    pub tool: &'static str,
}

pub static TOOL_ALIASES: &[ToolAlias] = &[
    // ----- dbbench
    ToolAlias { domain: "dbbench", alias: "run_sql", tool: "execute_sql" },
    ToolAlias { domain: "dbbench", alias: "sql", tool: "execute_sql" },
    ToolAlias { domain: "dbbench", alias: "execute_query", tool: "execute_sql" },
    ToolAlias { domain: "dbbench", alias: "query", tool: "execute_sql" },
    ToolAlias { domain: "dbbench", alias: "submit_answer", tool: "commit_final_answer" },
    ToolAlias { domain: "dbbench", alias: "final_answer", tool: "commit_final_answer" },
    ToolAlias { domain: "dbbench", alias: "commit_answer", tool: "commit_final_answer" },
    // ----- retail
    ToolAlias { domain: "retail", alias: "get_order_info", tool: "get_order_details" },
    ToolAlias { domain: "retail", alias: "get_order", tool: "get_order_details" },
    ToolAlias { domain: "retail", alias: "get_order_status", tool: "get_order_details" },
    ToolAlias { domain: "retail", alias: "get_product_info", tool: "get_product_details" },
    ToolAlias { domain: "retail", alias: "get_product", tool: "get_product_details" },
    ToolAlias { domain: "retail", alias: "cancel_order", tool: "cancel_pending_order" },
    ToolAlias { domain: "retail", alias: "modify_order_items", tool: "modify_pending_order_items" },
    ToolAlias { domain: "retail", alias: "modify_order_address", tool: "modify_pending_order_address" },
    ToolAlias { domain: "retail", alias: "modify_order_payment", tool: "modify_pending_order_payment" },
    ToolAlias { domain: "retail", alias: "exchange_order_items", tool: "exchange_delivered_order_items" },
    ToolAlias { domain: "retail", alias: "exchange_items", tool: "exchange_delivered_order_items" },
    ToolAlias { domain: "retail", alias: "return_order_items", tool: "return_delivered_order_items" },
    ToolAlias { domain: "retail", alias: "return_items", tool: "return_delivered_order_items" },
    ToolAlias { domain: "retail", alias: "find_user_by_email", tool: "find_user_id_by_email" },
    ToolAlias { domain: "retail", alias: "find_user_by_name_zip", tool: "find_user_id_by_name_zip" },
    ToolAlias { domain: "retail", alias: "update_user_address", tool: "modify_user_address" },
    ToolAlias { domain: "retail", alias: "list_product_types", tool: "list_all_product_types" },
    // ----- airline
    ToolAlias { domain: "airline", alias: "get_reservation_info", tool: "get_reservation_details" },
    ToolAlias { domain: "airline", alias: "get_reservation", tool: "get_reservation_details" },
    ToolAlias { domain: "airline", alias: "cancel_booking", tool: "cancel_reservation" },
    ToolAlias { domain: "airline", alias: "create_reservation", tool: "book_reservation" },
    ToolAlias { domain: "airline", alias: "book_flight", tool: "book_reservation" },
    ToolAlias { domain: "airline", alias: "search_flights", tool: "search_direct_flight" },
    ToolAlias { domain: "airline", alias: "search_direct_flights", tool: "search_direct_flight" },
    ToolAlias { domain: "airline", alias: "search_connecting_flights", tool: "search_onestop_flight" },
    ToolAlias { domain: "airline", alias: "search_onestop_flights", tool: "search_onestop_flight" },
    ToolAlias { domain: "airline", alias: "change_reservation_flights", tool: "update_reservation_flights" },
    ToolAlias { domain: "airline", alias: "update_baggage", tool: "update_reservation_baggages" },
    ToolAlias { domain: "airline", alias: "update_reservation_baggage", tool: "update_reservation_baggages" },
    ToolAlias { domain: "airline", alias: "update_passengers", tool: "update_reservation_passengers" },
    ToolAlias { domain: "airline", alias: "issue_certificate", tool: "send_certificate" },
    ToolAlias { domain: "airline", alias: "check_flight_status", tool: "get_flight_status" },
    ToolAlias { domain: "airline", alias: "list_airports", tool: "list_all_airports" },
    // ----- telecom
    ToolAlias { domain: "telecom", alias: "get_customer_by_phone_number", tool: "get_customer_by_phone" },
    ToolAlias { domain: "telecom", alias: "get_line_details", tool: "get_details_by_id" },
    ToolAlias { domain: "telecom", alias: "get_bills", tool: "get_bills_for_customer" },
    ToolAlias { domain: "telecom", alias: "enable_data_roaming", tool: "enable_roaming" },
    ToolAlias { domain: "telecom", alias: "disable_data_roaming", tool: "disable_roaming" },
    ToolAlias { domain: "telecom", alias: "refuel", tool: "refuel_data" },
    ToolAlias { domain: "telecom", alias: "add_data", tool: "refuel_data" },
    // ----- os
    ToolAlias { domain: "os", alias: "bash", tool: "bash_action" },
    ToolAlias { domain: "os", alias: "execute_bash", tool: "bash_action" },
    ToolAlias { domain: "os", alias: "run_bash", tool: "bash_action" },
    ToolAlias { domain: "os", alias: "shell", tool: "bash_action" },
    ToolAlias { domain: "os", alias: "run_command", tool: "bash_action" },
    ToolAlias { domain: "os", alias: "execute_command", tool: "bash_action" },
    ToolAlias { domain: "os", alias: "answer", tool: "answer_action" },
    ToolAlias { domain: "os", alias: "submit_answer", tool: "answer_action" },
    ToolAlias { domain: "os", alias: "final_answer", tool: "answer_action" },
    ToolAlias { domain: "os", alias: "finish", tool: "finish_action" },
    ToolAlias { domain: "os", alias: "done", tool: "finish_action" },
    // ----- every domain
    ToolAlias { domain: "*", alias: "get_user_info", tool: "get_user_details" },
    ToolAlias { domain: "*", alias: "get_user", tool: "get_user_details" },
    ToolAlias { domain: "*", alias: "transfer_to_human", tool: "transfer_to_human_agents" },
    ToolAlias { domain: "*", alias: "transfer_to_human_agent", tool: "transfer_to_human_agents" },
    ToolAlias { domain: "*", alias: "calculator", tool: "calculate" },
];

/// A string argument that must start with a fixed prefix (e.g. retail
/// order ids start with `#`). A value without it, made only of letters and
/// digits, gets the prefix. Applies to the key at any depth of the
/// arguments.
pub struct IdPrefix {
    /// Short domain name or `"*"`.
    pub domain: &'static str,
    /// Argument (object key) name.
    pub arg: &'static str,
    /// The prefix the value must start with.
    pub prefix: &'static str,
}

pub static ID_PREFIXES: &[IdPrefix] = &[IdPrefix {
    domain: "retail",
    arg: "order_id",
    prefix: "#",
}];

/// An argument that must be a JSON number: a string holding a number is
/// turned into that number. Applies to the key at any depth (e.g. the
/// `amount` of each payment). Top-level arguments whose JSON Schema type is
/// `integer` or `number` are handled the same way without an entry here.
pub struct NumericArg {
    /// Short domain name or `"*"`.
    pub domain: &'static str,
    /// Argument (object key) name.
    pub arg: &'static str,
}

pub static NUMERIC_ARGS: &[NumericArg] = &[
    NumericArg { domain: "airline", arg: "amount" },
    NumericArg { domain: "airline", arg: "total_baggages" },
    NumericArg { domain: "airline", arg: "nonfree_baggages" },
];

/// An argument that must be a JSON string: a number or boolean is sent as
/// its text (`12` → `"12"`). Applies to top-level arguments only.
pub struct StringArg {
    /// Short domain name or `"*"`.
    pub domain: &'static str,
    /// Argument (object key) name.
    pub arg: &'static str,
}

pub static STRING_ARGS: &[StringArg] = &[
    StringArg { domain: "os", arg: "answer" },
    StringArg { domain: "os", arg: "script" },
];

/// Keys that may hold a tool call's name / arguments in a call the model
/// wrote as text (```json blocks, `<tool_call>` tags, bare objects).
pub static TEXT_CALL_NAME_KEYS: &[&str] = &["name", "tool", "tool_name", "function", "function_name"];
pub static TEXT_CALL_ARGUMENT_KEYS: &[&str] =
    &["arguments", "parameters", "args", "input", "params", "tool_input"];
/// Tags around a call written as text, e.g. `<tool_call>{...}</tool_call>`.
pub static TEXT_CALL_TAGS: &[&str] = &["tool_call", "function_call", "tool_use", "call"];

/// Code written in a message instead of a call (a fenced block in one of
/// `fences`, or, for SQL, a message that is one statement): run as
/// `tool(argument = code)`.
pub struct CodeRescue {
    /// Short domain name.
    pub domain: &'static str,
    /// The tool that runs the code.
    pub tool: &'static str,
    /// Its argument holding the code.
    pub argument: &'static str,
    /// Languages of a fenced block (lower case) that hold this code.
    pub fences: &'static [&'static str],
    /// Upper-case first words of a statement outside a fence (empty: only
    /// fenced code is rescued).
    pub keywords: &'static [&'static str],
}

pub static CODE_RESCUE: &[CodeRescue] = &[
    CodeRescue {
        domain: "dbbench",
        tool: "execute_sql",
        argument: "query",
        fences: &["sql", "mysql"],
        keywords: &["SELECT", "INSERT", "UPDATE", "DELETE", "SHOW", "DESCRIBE", "DESC", "WITH"],
    },
    CodeRescue {
        domain: "os",
        tool: "bash_action",
        argument: "script",
        fences: &["bash", "sh", "shell"],
        keywords: &[],
    },
];

/// An action written in AgentBench's text protocol (`Act: answer(12)`,
/// `Act: finish`): the last `Act:` line naming `act` becomes
/// `tool(argument = what is between the first '(' and the last ')')`, or
/// the `Think:` line when there are no parentheses.
pub struct ActRescue {
    /// Short domain name.
    pub domain: &'static str,
    /// The word after `Act:` (lower case).
    pub act: &'static str,
    pub tool: &'static str,
    pub argument: &'static str,
}

pub static ACT_RESCUE: &[ActRescue] = &[
    ActRescue { domain: "os", act: "answer", tool: "answer_action", argument: "answer" },
    ActRescue { domain: "os", act: "finish", tool: "finish_action", argument: "thought" },
];

// ---------------------------------------------------------------------------
// Action realization: finishing calls and the names a task states
//
// The tables below are empty, so these rules are off: a person or training
// switches one on by adding an entry.
// ---------------------------------------------------------------------------

/// Hold back a finishing call (one that ends the episode) that comes in the
/// same reply after other calls: their results are not yet seen, so the
/// answer cannot rest on them. The earlier calls run; the finishing call is
/// blocked with `feedback` and the model calls it again after reading.
pub struct FinishHold {
    /// Short domain name or `"*"`.
    pub domain: &'static str,
    /// The finishing tool.
    pub tool: &'static str,
    /// The argument of the earlier calls that `exempt` reads (`""`: none is
    /// exempt).
    pub argument: &'static str,
    /// An earlier call whose `argument` starts with one of these (case
    /// ignored, leading spaces skipped) is not a read and does not hold the
    /// finishing call (e.g. `"INSERT"`: a write needs no reading).
    pub exempt: &'static [&'static str],
    /// Block text; `""` uses the message `finish_hold`. {tool} {calls}
    pub feedback: &'static str,
}

pub static FINISH_HOLDS: &[FinishHold] = &[];

/// Refuse a finishing call made in the reply right after a call failed (an
/// error from the environment, not a block): the answer cannot rest on a
/// result the model never got. A failure of the finishing tool itself does
/// not count (its retry is the fix).
pub struct FinishAfterError {
    /// Short domain name or `"*"`.
    pub domain: &'static str,
    /// The finishing tool.
    pub tool: &'static str,
    /// Block text; `""` uses the message `finish_after_error`. {tool} {failed}
    pub feedback: &'static str,
}

pub static FINISH_AFTER_ERRORS: &[FinishAfterError] = &[];

/// Names the task states in its opening message (a table, its columns, a
/// path), read between `before` and `after`; in `tool`'s string `argument`
/// a stated name written without its quotes, with `_` for its spaces or
/// other separators, in another case, or shortened (its first word and at
/// least one more kept, in order) is written back as stated, quoted with `quote` when it
/// holds characters other than letters, digits and `bare`. Text in quotes
/// (`'`, `"`, `` ` ``) is left as written; a name of one word is changed
/// only from unquoted to quoted.
pub struct NameRepair {
    /// Short domain name or `"*"`.
    pub domain: &'static str,
    /// The tool whose argument is repaired.
    pub tool: &'static str,
    /// The argument (a top-level string).
    pub argument: &'static str,
    /// The text just before a name in the opening message.
    pub before: &'static str,
    /// The text just after it (`""`: the end of the line).
    pub after: &'static str,
    /// Splits the text between into several names (`""`: one name).
    pub separator: &'static str,
    /// The quote put around a name that needs one (`""`: never quoted).
    pub quote: &'static str,
    /// Characters besides letters and digits a name may hold unquoted.
    pub bare: &'static str,
}

pub static NAME_REPAIRS: &[NameRepair] = &[];

// ---------------------------------------------------------------------------
// Action realization: policy gates
// ---------------------------------------------------------------------------

/// Switch for one gate of `realize/gates/` (by its module name). A
/// disabled gate neither blocks nor explains.
pub struct GateSwitch {
    pub gate: &'static str,
    pub enabled: bool,
}

pub static GATES: &[GateSwitch] = &[
    GateSwitch { gate: "airline_cancel_eligibility", enabled: true },
    GateSwitch { gate: "airline_basic_economy_change", enabled: true },
    GateSwitch { gate: "airline_flight_bookable", enabled: true },
    GateSwitch { gate: "airline_booking_payment", enabled: true },
    GateSwitch { gate: "airline_booking_baggage", enabled: true },
    GateSwitch { gate: "airline_baggage_update", enabled: true },
    GateSwitch { gate: "airline_passenger_count", enabled: true },
    GateSwitch { gate: "airline_update_payment", enabled: true },
    GateSwitch { gate: "retail_order_status", enabled: true },
    GateSwitch { gate: "retail_order_items", enabled: true },
    GateSwitch { gate: "retail_order_owner", enabled: true },
    GateSwitch { gate: "retail_payment_method", enabled: true },
    GateSwitch { gate: "os_interactive_command", enabled: true },
];

/// A program that waits for the keyboard or runs until stopped: a command
/// that starts one (at a command position of the script) is blocked,
/// unless it carries `batch_flag`, the option that makes it print and exit.
pub struct InteractiveProgram {
    /// Short domain name or `"*"`.
    pub domain: &'static str,
    /// The command name (a path to it counts too).
    pub program: &'static str,
    /// An option that makes it non-interactive (`""`: none does).
    pub batch_flag: &'static str,
    /// Whether it is harmless when its output goes into a pipe (a pager
    /// then just copies its input).
    pub piped_ok: bool,
    /// What to use instead (shown in the block message).
    pub instead: &'static str,
}

pub static INTERACTIVE_PROGRAMS: &[InteractiveProgram] = &[
    InteractiveProgram { domain: "os", program: "vi", batch_flag: "", piped_ok: false, instead: "sed -i, or echo/printf with > and >>" },
    InteractiveProgram { domain: "os", program: "vim", batch_flag: "", piped_ok: false, instead: "sed -i, or echo/printf with > and >>" },
    InteractiveProgram { domain: "os", program: "nano", batch_flag: "", piped_ok: false, instead: "sed -i, or echo/printf with > and >>" },
    InteractiveProgram { domain: "os", program: "emacs", batch_flag: "--batch", piped_ok: false, instead: "sed -i, or echo/printf with > and >>" },
    InteractiveProgram { domain: "os", program: "less", batch_flag: "", piped_ok: true, instead: "cat, head or tail" },
    InteractiveProgram { domain: "os", program: "more", batch_flag: "", piped_ok: true, instead: "cat, head or tail" },
    InteractiveProgram { domain: "os", program: "man", batch_flag: "", piped_ok: true, instead: "the program's --help" },
    InteractiveProgram { domain: "os", program: "top", batch_flag: "-b", piped_ok: false, instead: "top -b -n 1, or ps" },
    InteractiveProgram { domain: "os", program: "htop", batch_flag: "", piped_ok: false, instead: "ps -eo pid,user,%cpu,%mem,comm" },
    InteractiveProgram { domain: "os", program: "watch", batch_flag: "", piped_ok: false, instead: "running the command once" },
];

/// Free checked bags per passenger, by the booking user's membership and
/// the cabin (airline policy).
pub struct BagAllowance {
    pub membership: &'static str,
    pub cabin: &'static str,
    pub free_bags: i64,
}

pub static BAG_ALLOWANCE: &[BagAllowance] = &[
    BagAllowance { membership: "regular", cabin: "basic_economy", free_bags: 0 },
    BagAllowance { membership: "regular", cabin: "economy", free_bags: 1 },
    BagAllowance { membership: "regular", cabin: "business", free_bags: 2 },
    BagAllowance { membership: "silver", cabin: "basic_economy", free_bags: 1 },
    BagAllowance { membership: "silver", cabin: "economy", free_bags: 2 },
    BagAllowance { membership: "silver", cabin: "business", free_bags: 3 },
    BagAllowance { membership: "gold", cabin: "basic_economy", free_bags: 2 },
    BagAllowance { membership: "gold", cabin: "economy", free_bags: 3 },
    BagAllowance { membership: "gold", cabin: "business", free_bags: 4 },
];

/// Most payment methods of one source in one booking (airline policy).
pub struct PaymentLimit {
    /// `source` field of the user's payment method.
    pub source: &'static str,
    /// Human name used in messages.
    pub label: &'static str,
    pub max: usize,
}

pub static PAYMENT_LIMITS: &[PaymentLimit] = &[
    PaymentLimit { source: "certificate", label: "travel certificate", max: 1 },
    PaymentLimit { source: "credit_card", label: "credit card", max: 1 },
    PaymentLimit { source: "gift_card", label: "gift card", max: 3 },
];

/// Numbers of the airline policy the gates use.
pub struct AirlinePolicy {
    /// Price of one non-free checked bag, in dollars.
    pub bag_fee: i64,
    /// Travel insurance per passenger, in dollars.
    pub insurance_per_passenger: i64,
    /// Most passengers per reservation.
    pub max_passengers: usize,
    /// A booking this recent (hours) can always be cancelled.
    pub free_cancel_hours: i64,
    /// Flight statuses that mean the flight has taken off.
    pub flown_statuses: &'static [&'static str],
    /// The only status a flight can be booked in.
    pub bookable_status: &'static str,
}

pub static AIRLINE_POLICY: AirlinePolicy = AirlinePolicy {
    bag_fee: 50,
    insurance_per_passenger: 30,
    max_passengers: 5,
    free_cancel_hours: 24,
    flown_statuses: &["landed", "flying"],
    bookable_status: "available",
};

// ---------------------------------------------------------------------------
// Messages (blocks, explanations, annotations, injections)
// ---------------------------------------------------------------------------

/// A message template, looked up by key with [`crate::text::message`].
pub struct Message {
    pub key: &'static str,
    pub text: &'static str,
}

pub static MESSAGES: &[Message] = &[
    // ----- realize: interface
    // {name} {tools}
    Message {
        key: "unknown_tool",
        text: "There is no tool named `{name}`. Use the exact tool names from the tool list: {tools}.{suggestion}",
    },
    // {tool}
    Message { key: "unknown_tool_suggestion", text: " Did you mean `{tool}`?" },
    // ----- realize: finishing calls (used only by entries of FINISH_HOLDS
    // and FINISH_AFTER_ERRORS)
    // {tool} {calls}
    Message {
        key: "finish_hold",
        text: "`{tool}` was not run: it came in the same reply as {calls}, whose results you had not seen. Those results are above: read them, and call `{tool}` again in your next reply if they confirm the answer.",
    },
    // {tool} {failed}
    Message {
        key: "finish_after_error",
        text: "`{tool}` was not run: your last {failed} call failed, so its result was never seen. Read the error, correct the call and run it again; call `{tool}` once a result you have read gives the answer.",
    },
    // {name} {tools}
    Message {
        key: "text_call_unknown_tool",
        text: "Your message looks like a tool call written as text, and there is no tool named `{name}`. Call tools with structured tool calls (the function-calling interface), using the exact tool names from the tool list: {tools}.",
    },
    // {error}
    Message {
        key: "bad_arguments",
        text: "The arguments of this call are not a JSON object ({error}). Call the tool again with a structured tool call whose arguments are a JSON object.",
    },
    // ----- gates: airline
    // {reservation_id} {checks}
    Message {
        key: "cancel_not_eligible",
        text: "Reservation {reservation_id} cannot be cancelled under the policy. Conditions: {checks}. None of the conditions that allow a cancellation is met, so do not cancel it: explain this to the user.",
    },
    // {reservation_id}
    Message {
        key: "cancel_already",
        text: "Reservation {reservation_id} is already cancelled; there is nothing to cancel.",
    },
    // {reservation_id}
    Message {
        key: "basic_economy_change",
        text: "Reservation {reservation_id} is basic economy, and basic economy flights cannot be changed. Its cabin can be upgraded while keeping the same flights (update_reservation_flights with the current flights and the new cabin); otherwise tell the user the flights cannot be modified.",
    },
    // {reservation_id} {flights}
    Message {
        key: "cabin_change_flown",
        text: "Reservation {reservation_id} has a flight that has already been flown ({flights}); the cabin cannot be changed.",
    },
    // {flights}
    Message {
        key: "flight_not_bookable",
        text: "Only flights with status 'available' can be booked: {flights}. Search again (search_direct_flight / search_onestop_flight list only available flights) and offer the user another flight.",
    },
    // {count} {max}
    Message {
        key: "too_many_passengers",
        text: "A reservation can have at most {max} passengers; this booking lists {count}.",
    },
    // {current} {given}
    Message {
        key: "passenger_count_change",
        text: "The number of passengers cannot change: the reservation has {current} and the call lists {given}. Update the details of the existing passengers only.",
    },
    // {label} {count} {max}
    Message {
        key: "payment_limit",
        text: "A booking can use at most {max} {label}(s); this one uses {count}. Split the payment again: at most one travel certificate, one credit card and three gift cards.",
    },
    // {payment_id}
    Message {
        key: "payment_not_in_profile",
        text: "Payment method {payment_id} is not in the user's profile; only payment methods already in the profile can be used (see get_user_details).",
    },
    // {payment_id} {balance} {amount}
    Message {
        key: "payment_balance",
        text: "Payment method {payment_id} has a balance of {balance}, less than the {amount} charged to it. Charge less to it and put the rest on another method.",
    },
    // {total} {paid} {breakdown}
    Message {
        key: "payment_total",
        text: "The payments add up to {paid}, but the booking costs {total} ({breakdown}). The payment amounts must add up exactly to the total.",
    },
    // {given} {expected} {total} {free} {membership} {cabin} {passengers}
    Message {
        key: "booking_nonfree_bags",
        text: "nonfree_baggages should be {expected}, not {given}: a {membership} member gets {free} free checked bag(s) per {cabin} passenger, so {passengers} passenger(s) have {free_total} free bag(s) and {total} bag(s) leave {expected} to pay ($50 each). Do not add bags the user does not need.",
    },
    // {reservation_id} {current} {given}
    Message {
        key: "bags_removed",
        text: "Checked bags can only be added, not removed: reservation {reservation_id} has {current} bag(s) and the call sets {given}.",
    },
    // {reservation_id} {current_nonfree} {nonfree}
    Message {
        key: "paid_bags_removed",
        text: "Reservation {reservation_id} already pays for {current_nonfree} non-free bag(s); nonfree_baggages cannot go down to {nonfree} (bags can only be added).",
    },
    // {nonfree} {given}
    Message {
        key: "nonfree_over_total",
        text: "nonfree_baggages ({nonfree}) cannot be larger than total_baggages ({given}).",
    },
    // {payment_id}
    Message {
        key: "certificate_for_update",
        text: "A travel certificate ({payment_id}) cannot pay for a change to a reservation; use one gift card or credit card from the user's profile.",
    },
    // ----- gates: retail
    // {order_id} {status} {tool} {allowed}
    Message {
        key: "order_status",
        text: "Order {order_id} has status '{status}', and {tool} only applies to orders whose status is '{allowed}'. {advice}",
    },
    Message {
        key: "order_status_advice_delivered",
        text: "A pending order's items are changed with modify_pending_order_items and it is cancelled with cancel_pending_order; an order in any other status cannot be changed: tell the user.",
    },
    Message {
        key: "order_status_advice_pending",
        text: "Delivered orders are exchanged or returned with exchange_delivered_order_items / return_delivered_order_items; an order in any other status cannot be changed: tell the user.",
    },
    Message {
        key: "order_status_advice_modified",
        text: "After an order's items have been modified, the policy does not allow modifying or cancelling it any more: tell the user.",
    },
    // {order_id} {items} {order_items}
    Message {
        key: "items_not_in_order",
        text: "Item id(s) {items} are not among the items of order {order_id} (its items: {order_items}). item_ids must be item ids of this order, not product ids; look the order up with get_order_details.",
    },
    // {item} {product} {reason}
    Message {
        key: "new_item_invalid",
        text: "New item {item} cannot replace an item of product {product}: {reason}. Pick an available variant of the same product from get_product_details.",
    },
    // {order_id} {owner} {users}
    Message {
        key: "order_other_user",
        text: "Order {order_id} belongs to user {owner}, not to the authenticated user ({users}). You can only act on the authenticated user's own orders.",
    },
    // {payment_id} {original}
    Message {
        key: "refund_method",
        text: "The refund of a return goes to the original payment method ({original}) or to an existing gift card; {payment_id} is neither.",
    },
    // {payment_id} {balance} {amount}
    Message {
        key: "gift_card_balance",
        text: "Gift card {payment_id} has a balance of {balance}, which does not cover {amount}. Ask the user for another payment method.",
    },
    // ----- regulate
    // ----- gates: os
    // {program} {instead}
    Message {
        key: "interactive_command",
        text: "This command starts `{program}`, which waits for keyboard input or runs until stopped: it would hang until the timeout interrupts it, and the turn would be lost. It was not run. Use {instead} instead.",
    },
    // {tool} {count} {advice}
    Message {
        key: "repeated_failure",
        text: "This identical `{tool}` call has now failed {count} times with the same result. Do not repeat it unchanged: {advice}",
    },
    // {tool} {count}
    Message {
        key: "repeated_success",
        text: "This identical `{tool}` call has now returned the same result {count} times in a row: you already have it. Do not call it again; use the result to take the next step or answer the user.",
    },
    // {tool} {count}
    Message {
        key: "error_streak:dbbench",
        text: "`{tool}` has failed {count} times in a row. Check the exact table and column names (SHOW TABLES, DESCRIBE `table`), put them in backticks, quote compared values, and send a simpler statement before building on it.",
    },
    // {tool} {count}
    Message {
        key: "error_streak:os",
        text: "`{tool}` has failed {count} times in a row. Send one short, non-interactive command that cannot run long (limit find to the directory in question, no loops without an end), and build on its output.",
    },
    // {tool} {count}
    Message {
        key: "error_streak",
        text: "`{tool}` has failed {count} times in a row. Re-read its description and the error: check every id against what the lookups returned, and do not retry with the same arguments. If the request cannot be done under the policy, tell the user instead.",
    },
    // {turns}
    Message {
        key: "stall",
        text: "No tool call has succeeded in the last {turns} turns. Decide the next concrete step: ask the user for exactly the missing information, make the next tool call with structured tool calls, or tell the user what cannot be done.",
    },
    Message {
        key: "repeated_message",
        text: "You sent the same message as before. Do not repeat it: make progress with the information you have, or ask a different, specific question.",
    },
    // {steps}
    Message {
        key: "low_budget",
        text: "Only {steps} steps remain in this conversation: finish the user's request now (complete the pending action or tell the user what remains).",
    },
    // {rounds}
    Message {
        key: "rounds_left",
        text: "Only {rounds} turn(s) remain in this task: finish now with the tool that ends it.",
    },
    // {rounds}
    Message {
        key: "rounds_left:os",
        text: "Only {rounds} turn(s) remain in this task. If the output above holds the answer, call answer_action with only the value now; if the operation is done, call finish_action.",
    },
    // {errors}
    Message {
        key: "low_errors",
        text: "Only {errors} more tool errors are allowed before this conversation is cut off. Double-check ids and arguments against the lookups before each call.",
    },
    // {tool} {count}
    Message {
        key: "stuck_stop",
        text: "The same `{tool}` call failed {count} times in a row despite the runtime harness's notes; the episode is stuck.",
    },
];

/// Advice for a failed call, chosen by a (lower-case) substring of the
/// error text; the first matching entry wins, `""` matches everything.
pub struct ErrorAdvice {
    pub contains: &'static str,
    pub advice: &'static str,
}

pub static ERROR_ADVICE: &[ErrorAdvice] = &[
    // ----- MySQL (dbbench)
    ErrorAdvice {
        contains: "1064 (42000)",
        advice: "the statement is not valid MySQL. Put backticks (not double quotes) around names with spaces, quote string values with single quotes, and send one statement.",
    },
    ErrorAdvice {
        contains: "1146 (42s02)",
        advice: "there is no such table: use the exact table name from the question's table information, in backticks (SHOW TABLES lists them).",
    },
    ErrorAdvice {
        contains: "1054 (42s22)",
        advice: "there is no such column: use the exact header names in backticks (DESCRIBE the table to list them).",
    },
    ErrorAdvice {
        contains: "1292 (22007)",
        advice: "a TEXT column was compared with a bare number: quote the value ('16'), or CAST the column.",
    },
    ErrorAdvice {
        contains: "sql execution timed out",
        advice: "the query ran too long: avoid joining the table with itself; filter with WHERE first.",
    },
    // ----- shell (os)
    ErrorAdvice {
        contains: "did not finish within",
        advice: "the command ran until the timeout: do not start programs that wait for input, and limit find or du to the directory in question instead of /.",
    },
    ErrorAdvice {
        contains: "the process limit",
        advice: "the command started too many processes at once; every process was stopped. Run the work in one process, without a fork loop.",
    },
    ErrorAdvice {
        contains: "the disk quota",
        advice: "the command wrote more than the machine's disk allows; every process was stopped. Write only the files the task needs.",
    },
    ErrorAdvice {
        contains: "not found",
        advice: "the id does not exist. Check it against what the user said and what the lookups returned (order ids keep their leading '#'; item ids differ from product ids), or look it up first.",
    },
    ErrorAdvice {
        contains: "balance",
        advice: "the payment method cannot cover the amount: use another payment method from the user's profile.",
    },
    ErrorAdvice {
        contains: "non-pending",
        advice: "the order is not pending, so this action is not possible: tell the user.",
    },
    ErrorAdvice {
        contains: "non-delivered",
        advice: "the order is not delivered, so this action is not possible: tell the user.",
    },
    ErrorAdvice {
        contains: "[blocked",
        advice: "follow the runtime harness's explanation above instead of retrying.",
    },
    ErrorAdvice {
        contains: "",
        advice: "change the arguments according to the error, use another tool, or tell the user it cannot be done.",
    },
];

// ---------------------------------------------------------------------------
// Trajectory regulation
// ---------------------------------------------------------------------------

/// Lookups whose successful result is the id of the user the agent just
/// authenticated (their text answer is the user id). Gates that check the
/// owner of an order compare with these ids.
pub static AUTH_TOOLS: &[&str] = &["find_user_id_by_email", "find_user_id_by_name_zip"];

/// Arguments naming the record a write tool changes; a successful write
/// marks that record as changed in this episode (see the cancellation gate).
pub static RECORD_ID_ARGS: &[&str] = &["reservation_id", "order_id"];

/// A domain whose episode ends after a fixed number of agent turns (tool
/// calls and messages alike): one note when `warn_left` turns remain.
pub struct RoundLimit {
    /// Short domain name.
    pub domain: &'static str,
    pub rounds: u32,
    pub warn_left: u32,
}

pub static ROUND_LIMITS: &[RoundLimit] = &[RoundLimit { domain: "os", rounds: 8, warn_left: 2 }];

/// Thresholds of the regulation layer.
pub struct Regulation {
    /// Annotate when the identical call has failed this many times.
    pub repeat_annotate: u32,
    /// Stop the episode when the identical call has failed this many times
    /// in a row (clearly stuck).
    pub repeat_stop: u32,
    /// Annotate when the identical call has returned the same successful
    /// result this many times in a row.
    pub repeat_success_annotate: u32,
    /// Annotate when one tool has failed this many times in a row.
    pub error_streak: u32,
    /// Inject a recovery message after this many agent turns without a
    /// successful tool call (once per stall).
    pub stall_turns: u32,
    /// Warn once when the steps left fall to this fraction of the maximum.
    pub low_budget_fraction: f64,
    /// Warn once when this many tool errors are left.
    pub low_errors_left: u32,
}

pub static REGULATION: Regulation = Regulation {
    repeat_annotate: 2,
    repeat_stop: 6,
    repeat_success_annotate: 3,
    error_streak: 3,
    stall_turns: 10,
    low_budget_fraction: 0.1,
    low_errors_left: 2,
};
