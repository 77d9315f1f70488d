// Express 5 with express-validator and express-rate-limit: `node express_app.js PORT`.
// NODE_ENV=development makes Express's final handler answer errors with their stack trace.
"use strict";
const express = require("express");
const { body, query, validationResult } = require("express-validator");
const { rateLimit } = require("express-rate-limit");

const SECRET = "postgres://orders:Pl4ntedSecret@db.internal:5432/orders";
const app = express();
app.use(express.json({ limit: "1kb" }));

function validate(req, res, next) {
  const result = validationResult(req);
  if (!result.isEmpty()) return res.status(422).json({ errors: result.array() });
  return next();
}

app.post(
  "/orders",
  body("customer.name").isString().notEmpty(),
  body("customer.email").isEmail(),
  body("items").isArray({ min: 1 }),
  body("items.*.qty").isInt({ min: 1 }).withMessage("qty must be a positive integer"),
  validate,
  (req, res) => res.status(201).json({ ok: true }),
);

app.get("/orders", query("limit").optional().isInt({ max: 100 }), query("status").optional().isIn(["open", "closed"]), validate, (req, res) => res.json([]));

app.get("/me", (req, res) => {
  res.set("WWW-Authenticate", 'Bearer realm="api"');
  res.status(401).json({ message: "Missing or invalid bearer token" });
});

app.delete("/orders/:id", (req, res) => res.status(403).json({ message: "You may not delete orders" }));

app.get("/orders/:id", (req, res) => res.status(404).json({ message: `Order ${req.params.id} not found` }));

for (const [path, standardHeaders] of [["/search6", "draft-6"], ["/search7", "draft-7"], ["/search8", "draft-8"]]) {
  app.get(path, rateLimit({ windowMs: 60_000, limit: 1, standardHeaders, legacyHeaders: false }), (req, res) => res.json([]));
}
app.get("/searchx", rateLimit({ windowMs: 60_000, limit: 1, standardHeaders: false, legacyHeaders: true }), (req, res) => res.json([]));

app.get("/report", () => {
  throw new Error(`cannot reach ${SECRET}`);
});

app.listen(Number(process.argv[2]), "127.0.0.1");
