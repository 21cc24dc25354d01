// Checks that a file is a well-formed PNG: signature, IHDR (WIDTHxHEIGHT, 8-bit RGB), every
// chunk's CRC, and IDAT data that inflates to exactly one filter byte plus WIDTH RGB pixels per
// row, with more than one colour in it. Usage: node check_png.js FILE WIDTH HEIGHT
'use strict';
const fs = require('fs');
const zlib = require('zlib');

const [file, w, h] = process.argv.slice(2);
const png = fs.readFileSync(file);
const fail = (msg) => {
  console.error(`${file}: ${msg}`);
  process.exit(1);
};
const table = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; ++k) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
const crc32 = (buf) => {
  let c = 0xffffffff;
  for (const b of buf) c = table[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
};

if (!png.subarray(0, 8).equals(Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]))) fail('no PNG signature');
let at = 8, ihdr = null, end = false;
const idat = [];
while (at + 12 <= png.length && !end) {
  const len = png.readUInt32BE(at), type = png.toString('latin1', at + 4, at + 8);
  if (at + 12 + len > png.length) fail(`chunk ${type} runs past the end`);
  if (crc32(png.subarray(at + 4, at + 8 + len)) !== png.readUInt32BE(at + 8 + len)) fail(`bad CRC in ${type}`);
  const data = png.subarray(at + 8, at + 8 + len);
  if (type === 'IHDR') {
    if (at !== 8 || len !== 13) fail('IHDR is not the first chunk of 13 bytes');
    ihdr = { width: data.readUInt32BE(0), height: data.readUInt32BE(4), depth: data[8], color: data[9], interlace: data[12] };
  } else if (type === 'IDAT') idat.push(data);
  else if (type === 'IEND') end = true;
  at += 12 + len;
}
if (!ihdr || !end || !idat.length) fail('missing IHDR, IDAT or IEND');
if (ihdr.width !== Number(w) || ihdr.height !== Number(h)) fail(`size ${ihdr.width}x${ihdr.height}, want ${w}x${h}`);
if (ihdr.depth !== 8 || ihdr.color !== 2 || ihdr.interlace !== 0) fail(`not 8-bit RGB: ${JSON.stringify(ihdr)}`);
const raw = zlib.inflateSync(Buffer.concat(idat));
const stride = 1 + 3 * ihdr.width;
if (raw.length !== stride * ihdr.height) fail(`image data is ${raw.length} bytes, want ${stride * ihdr.height}`);
for (let y = 0; y < ihdr.height; ++y) if (raw[y * stride] > 4) fail(`row ${y} has filter type ${raw[y * stride]}`);
const colours = new Set();  // sampled from rows with filter 0 (none), whose bytes are the pixels

for (let y = 0; y < ihdr.height && colours.size < 3; y += 7)
  for (let x = 0; x < ihdr.width && raw[y * stride] === 0; x += 5) colours.add(raw.readUIntBE(y * stride + 1 + 3 * x, 3));
if (colours.size < 3) fail('the image is (nearly) blank');
console.log(`${file}: ok (${ihdr.width}x${ihdr.height} PNG)`);
