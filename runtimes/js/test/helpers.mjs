import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const FIX = process.env.ECDYSIS_FIXTURES ?? join(repo, "target", "runtimes-fixtures");
export const JS = join(FIX, "js");

/** The tools of the Rust host's doctor and sandbox tests. */
export const TOOLS = [
  { name: "get_order_details", description: "Get an order.", parameters: '{"type":"object"}', mutates: false },
  { name: "get_user_details", description: "Get a user.", parameters: '{"type":"object"}', mutates: false },
  { name: "cancel_pending_order", description: "Cancel an order.", parameters: '{"type":"object"}', mutates: true },
];
