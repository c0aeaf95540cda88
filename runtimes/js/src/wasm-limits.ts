/**
 * The memory limit for jco: V8 grows a wasm memory up to 4 GiB on request,
 * so before a core module is compiled its memory declarations get a
 * maximum of `limit` bytes (in 64 KiB pages). A `memory.grow` past it then
 * fails inside the guest, as wasmtime's store limit makes it fail.
 */

function readLeb(bytes: Uint8Array, at: number): [number, number] {
  let result = 0;
  let shift = 0;
  let pos = at;
  for (;;) {
    const b = bytes[pos++];
    result += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if ((b & 0x80) === 0) return [result, pos];
  }
}

function leb(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
  return out;
}

/** A copy of a core module with every defined 32-bit memory capped at
 * `limitBytes`. Imported memories are capped where they are defined. */
export function capMemories(module: Uint8Array, limitBytes: number): Uint8Array<ArrayBuffer> {
  const pages = Math.max(1, Math.floor(limitBytes / 65536));
  const out: number[] = Array.from(module.subarray(0, 8));
  let pos = 8;
  while (pos < module.length) {
    const id = module[pos];
    const [size, start] = readLeb(module, pos + 1);
    const end = start + size;
    if (id !== 5) {
      for (let i = pos; i < end; i++) out.push(module[i]);
      pos = end;
      continue;
    }
    const body: number[] = [];
    let [count, p] = readLeb(module, start);
    body.push(...leb(count));
    while (count-- > 0) {
      const flags = module[p++];
      if (flags & 0x04) throw new Error("64-bit memories are not supported");
      let min: number;
      let max: number | undefined;
      [min, p] = readLeb(module, p);
      if (flags & 0x01) [max, p] = readLeb(module, p);
      const capped = Math.max(min, Math.min(max ?? pages, pages));
      body.push(flags | 0x01, ...leb(min), ...leb(capped));
    }
    out.push(5, ...leb(body.length), ...body);
    pos = end;
  }
  return Uint8Array.from(out);
}
