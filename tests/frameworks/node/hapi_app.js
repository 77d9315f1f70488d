// hapi with Joi validation and hapi-rate-limit: `node hapi_app.js PORT`.
// /orders reports Joi's details (the failAction many apps use); /strict keeps hapi's default,
// which names no field.
"use strict";
const Hapi = require("@hapi/hapi");
const Joi = require("joi");

const ORDER = Joi.object({
  customer: Joi.object({ name: Joi.string().required(), email: Joi.string().email() }).required(),
  items: Joi.array().items(Joi.object({ sku: Joi.string().required(), qty: Joi.number().integer().min(1) })),
});

function details(request, h, err) {
  return h
    .response({ statusCode: 400, error: "Bad Request", message: err.message, details: err.details })
    .code(400)
    .takeover();
}

async function main() {
  const server = Hapi.server({ host: "127.0.0.1", port: Number(process.argv[2]) });
  await server.register({
    plugin: require("hapi-rate-limit"),
    options: { enabled: false, userLimit: 1, userCache: { expiresIn: 60_000 }, pathLimit: false },
  });
  const opts = { abortEarly: false };
  server.route([
    { method: "POST", path: "/orders", options: { validate: { payload: ORDER, options: opts, failAction: details } }, handler: () => ({ ok: true }) },
    { method: "POST", path: "/strict", options: { validate: { payload: ORDER } }, handler: () => ({ ok: true }) },
    {
      method: "GET",
      path: "/orders",
      options: { validate: { query: Joi.object({ limit: Joi.number().integer().max(100) }), options: opts, failAction: details } },
      handler: () => [],
    },
    { method: "POST", path: "/upload", options: { payload: { maxBytes: 1024 } }, handler: () => ({ ok: true }) },
    { method: "GET", path: "/search", options: { plugins: { "hapi-rate-limit": { enabled: true } } }, handler: () => [] },
    {
      method: "GET",
      path: "/me",
      handler: () => {
        const Boom = require("@hapi/boom");
        throw Boom.unauthorized("Bad credentials", "Bearer");
      },
    },
    {
      method: "DELETE",
      path: "/orders/{id}",
      handler: () => {
        const Boom = require("@hapi/boom");
        throw Boom.forbidden("Only administrators may delete orders");
      },
    },
    {
      method: "GET",
      path: "/report",
      handler: () => {
        throw new Error("cannot reach postgres://orders:Pl4ntedSecret@db.internal:5432/orders");
      },
    },
  ]);
  await server.start();
}

main();
