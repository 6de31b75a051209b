// memviz_viewer.mjs SNAPSHOT [--no-wall-clock] - loads a memviz snapshot the way PyTorch's
// viewer page (torch/utils/viz/MemoryViz.js) does, in a JavaScript engine, and runs the
// computations its three views make, without drawing: an exception, or a value the page
// would show as NaN, "Invalid Date" or "undefined", fails with exit status 1.
// What it imitates (docs/memviz.md): the page's own unpickler (integers up to 8 bytes
// become Numbers, longer ones BigInts; APPENDS / SETITEMS add a batch with one spread
// call; BINPUT/BINGET share one object), annotate_snapshot (free_requested +
// free_completed of one address in a row become one 'free'; each block's addr is its
// segment's address plus the sizes before it), the Active Memory / Cached Segment
// timelines (alloc paired with free_completed by address, sizes summed), the Allocator
// State History (walking back from the final segments; each block must fall in a
// segment; segment_map / segment_unmap cut a mapped range out of the segment holding it
// and merge it back with an adjacent one of the same stream), and the text of each event
// and hover (sizes, addresses in hex, time_us as a date). Written for this project from
// those facts; no code of the page is copied.
import { readFileSync } from 'node:fs';

const path = process.argv[2];
const wallClock = !process.argv.includes('--no-wall-clock');

function unpickle(buf) {
  const b = new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
  const dec = new TextDecoder('utf-8', { fatal: true });
  const stack = [], marks = [], memo = [];
  let at = 0;
  const u32 = () => { const v = b[at] + b[at + 1] * 256 + b[at + 2] * 65536 + b[at + 3] * 16777216; at += 4; return v; };
  const since = () => stack.splice(marks.pop(), Infinity);
  for (;;) {
    const op = b[at++];
    switch (op) {
      case 0x80: { const v = b[at++]; if (v < 2 || v > 4) throw new Error(`protocol ${v}`); break; }
      case 0x95: at += 8; break;  // FRAME
      case 0x7d: stack.push({}); break;  // EMPTY_DICT
      case 0x5d: stack.push([]); break;  // EMPTY_LIST
      case 0x29: stack.push([]); break;  // EMPTY_TUPLE
      case 0x28: marks.push(stack.length); break;  // MARK
      case 0x65: { const items = since(); stack.at(-1).push(...items); break; }  // APPENDS
      case 0x61: { const v = stack.pop(); stack.at(-1).push(v); break; }  // APPEND
      case 0x75: { const items = since(); const d = stack.at(-1);  // SETITEMS
        for (let i = 0; i < items.length; i += 2) d[items[i]] = items[i + 1]; break; }
      case 0x73: { const v = stack.pop(); const k = stack.pop(); stack.at(-1)[k] = v; break; }
      case 0x4b: stack.push(b[at++]); break;  // BININT1
      case 0x4d: stack.push(b[at] + b[at + 1] * 256); at += 2; break;  // BININT2
      case 0x4a: { let v = u32(); if (v > 0x7fffffff) v -= 0x100000000; stack.push(v); break; }
      case 0x8a: {  // LONG1
        const n = b[at++];
        let v = 0n;
        for (let i = n - 1; i >= 0; --i) v = (v << 8n) | BigInt(b[at + i]);
        if (n > 0 && b[at + n - 1] >= 128) v -= 1n << BigInt(8 * n);
        at += n;
        stack.push(n <= 8 ? Number(v) : v);
        break;
      }
      case 0x47: { const dv = new DataView(b.buffer, b.byteOffset + at, 8); stack.push(dv.getFloat64(0, false)); at += 8; break; }
      case 0x58: { const n = u32(); stack.push(dec.decode(b.subarray(at, at + n))); at += n; break; }
      case 0x8c: { const n = b[at++]; stack.push(dec.decode(b.subarray(at, at + n))); at += n; break; }
      case 0x88: stack.push(true); break;
      case 0x89: stack.push(false); break;
      case 0x4e: stack.push(null); break;
      case 0x85: stack.push([stack.pop()]); break;
      case 0x86: stack.push(stack.splice(-2, Infinity)); break;
      case 0x87: stack.push(stack.splice(-3, Infinity)); break;
      case 0x94: memo.push(stack.at(-1)); break;  // MEMOIZE
      case 0x71: memo[b[at++]] = stack.at(-1); break;  // BINPUT
      case 0x72: memo[u32()] = stack.at(-1); break;  // LONG_BINPUT
      case 0x68: stack.push(memo[b[at++]]); break;  // BINGET
      case 0x6a: stack.push(memo[u32()]); break;  // LONG_BINGET
      case 0x2e: return stack.pop();  // STOP
      default: throw new Error(`opcode 0x${op.toString(16)} at byte ${at - 1}: the page has no case for it`);
    }
  }
}

// The page's text for a size: arithmetic the way formatSize does it.
function size(num, what) {
  if (typeof num !== 'number' || !Number.isFinite(num)) throw new Error(`${what}: ${num} is not a Number`);
  let n = Math.abs(num);
  for (let i = 0; i < 8 && n >= 1024; ++i) n /= 1024;
  return n.toFixed(1);
}
function hex(v, what) {
  if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw new Error(`${what}: ${v} is not an exact Number`);
  return v.toString(16);
}
function frames(list, what) {
  if (!Array.isArray(list)) throw new Error(`${what}: frames is not a list`);
  for (const f of list) {
    if (typeof f.name !== 'string' || typeof f.filename !== 'string' || typeof f.line !== 'number')
      throw new Error(`${what}: a frame without text name/filename and a numeric line`);
    f.name.includes('PyEval_'); f.filename.includes('ceval.c');  // the page's frame filter
  }
}

function check(snap) {
  for (const k of ['segments', 'device_traces', 'allocator_settings'])
    if (!(k in snap)) throw new Error(`no ${k}`);
  JSON.stringify(snap.allocator_settings);  // the settings view (throws on a BigInt)
  const streams = new Map([[0, 0]]);
  const streamName = s => { if (!streams.has(s)) streams.set(s, streams.size); return streams.get(s); };
  const traces = snap.device_traces.map((trace, d) => {
    const out = [];
    for (const t of trace) {
      const what = `device ${d} entry ${out.length} (${t.action})`;
      frames(t.frames ?? [], what);
      t.stream = streamName(t.stream);
      if (t.action === 'oom') {
        size(t.device_free, `${what} device_free`);
      } else {
        hex(t.addr, `${what} addr`);
      }
      size(t.size, `${what} size`);
      if (wallClock) {
        const date = new Date(t.time_us / 1000);
        const year = date.getUTCFullYear();
        if (Number.isNaN(year) || year < 2001 || year > 2100)
          throw new Error(`${what}: time_us ${t.time_us} shows as ${date}`);
      }
      const prev = out.at(-1);
      if (t.action === 'free_completed' && prev && prev.action === 'free_requested' && prev.addr === t.addr) {
        prev.action = 'free';
        continue;
      }
      out.push(t);
    }
    return out;
  });
  for (const seg of snap.segments) {
    seg.stream = streamName(seg.stream);
    let addr = seg.address;
    frames(seg.frames ?? [], `segment ${hex(seg.address, 'segment address')}`);
    for (const b of seg.blocks) {
      b.addr = addr;
      frames(b.frames, `block ${hex(addr, 'block address')}`);
      size(b.requested_size, 'block requested_size');
      addr += b.size;
    }
    if (addr !== seg.address + seg.total_size) throw new Error(`segment ${hex(seg.address)}: blocks do not add up`);
  }
  traces.forEach((events, d) => {
    // Timelines: every element's size is a Number, the running total never negative.
    for (const segmentsView of [false, true]) {
      const [alloc, free, done] = segmentsView ? ['segment_alloc', 'segment_free', 'segment_free'] : ['alloc', 'free', 'free_completed'];
      const live = new Map();
      let total = 0;
      for (const e of events) {
        if (e.action === alloc) { live.set(e.addr, e.size); total += e.size; }
        else if ((e.action === free || e.action === done) && live.has(e.addr)) { total -= live.get(e.addr); live.delete(e.addr); }
        if (!(total >= 0)) throw new Error(`device ${d}: the timeline's total went to ${total}`);
      }
    }
    // Allocator State History: back from the final state, one event at a time.
    const segs = new Map(), segStreams = new Map(), blocks = new Map();
    for (const s of snap.segments) if (s.device === d) {
      segs.set(s.address, s.total_size);
      segStreams.set(s.address, s.stream);
      for (const b of s.blocks)
        if (b.state === 'active_allocated' || b.state === 'active_pending_free')
          blocks.set(b.addr, { size: b.size, pending: b.state === 'active_pending_free' });
    }
    const inSegment = a => [...segs].some(([s, n]) => a >= s && a < s + n);
    for (let i = events.length - 1; i >= 0; --i) {
      const e = events[i], what = `device ${d} entry ${i} (${e.action})`;
      switch (e.action) {
        case 'free': case 'free_completed':
          blocks.set(e.addr, { size: e.size, pending: e.action === 'free_completed' });
          if (!inSegment(e.addr)) throw new Error(`${what}: block ${hex(e.addr)} has no segment (the page reads .occupied of null)`);
          break;
        case 'free_requested':
          if (!blocks.has(e.addr)) throw new Error(`${what}: no block ${hex(e.addr)} (the page sets .free_requested of undefined)`);
          blocks.get(e.addr).pending = false;
          break;
        case 'alloc': blocks.delete(e.addr); break;
        case 'segment_free': segs.set(e.addr, e.size); segStreams.set(e.addr, e.stream); break;
        case 'segment_unmap': {  // mapped again, merged with same-stream neighbours
          const at = e.addr;
          segs.set(at, e.size);
          segStreams.set(at, e.stream);
          const after = at + e.size;
          if (segs.has(after) && segStreams.get(after) === e.stream) {
            segs.set(at, e.size + segs.get(after));
            segs.delete(after);
            segStreams.delete(after);
          }
          for (const [s, n] of segs) if (s + n === at && segStreams.get(s) === e.stream) {
            segs.set(s, n + segs.get(at));
            segs.delete(at);
            segStreams.delete(at);
            break;
          }
          break;
        }
        case 'segment_alloc':
        case 'segment_map':
          if (e.action === 'segment_map') {  // cut out of the segment holding it
            const owner = [...segs].find(([s, n]) => s <= e.addr && e.addr + e.size <= s + n);
            if (!owner) throw new Error(`${what}: no segment holds ${hex(e.addr)} (the page reads .addr of undefined)`);
            const [s, n] = owner, stream = segStreams.get(s);
            segs.delete(s);
            segStreams.delete(s);
            if (s < e.addr) { segs.set(s, e.addr - s); segStreams.set(s, stream); }
            if (e.addr + e.size < s + n) { segs.set(e.addr + e.size, s + n - e.addr - e.size); segStreams.set(e.addr + e.size, stream); }
          } else {
            segs.delete(e.addr);
          }
          for (const a of blocks.keys())
            if (a >= e.addr && a < e.addr + e.size) throw new Error(`${what}: block ${hex(a)} would have no segment`);
          break;
        default: break;
      }
    }
  });
  return traces.reduce((n, t) => n + t.length, 0);
}

try {
  const n = check(unpickle(readFileSync(path)));
  console.log(`ok: ${path}: ${n} events as the viewer shows them`);
} catch (e) {
  console.log(`memviz_viewer: ${path}: ${e.message}`);
  process.exit(1);
}
