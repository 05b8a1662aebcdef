// Generated from the API's OpenAPI schema by `npm run generate`: do not edit.

export interface paths {
    "/api/v1/diner-sessions/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * @description Open a diner session. A publishable key sends an empty body and gets a guest diner;
         *     a merchant key names the diner its backend signed in.
         */
        post: operations["diner_sessions_open"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/diner-sessions/end/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Sign out: this session's tokens are refused from now on. */
        post: operations["diner_sessions_end"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/diner-sessions/refresh/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * @description A token of the same session with a later expiry (the old one stays valid until its
         *     own expiry, so a lost answer can be refreshed again).
         */
        post: operations["diner_sessions_refresh"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/diners/{diner_id}/revoke-sessions/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * @description End every session of one diner (e.g. the diner's account was closed or stolen).
         *     An id no diner can have is 400 VALIDATION_ERROR, as when signing one in.
         */
        post: operations["diner_sessions_revoke_diner"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/idempotency-tokens/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Answers 429 IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED when the batch would leave more tokens outstanding (issued, neither used nor expired) than the caller's share of the tenant's quota (`scope`: `principal`), than the tenant's quota (`tenant`), or, for a caller held to a share of it, than that share (`tenant_share`); 429 RATE_LIMITED when the write rate limit refuses it (one write, whatever the count). */
        post: operations["v1_idempotency_tokens_create"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/idempotency-tokens/check/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Which of these tokens can still be used (one Redis round trip for all of them). */
        post: operations["v1_idempotency_tokens_check"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/menu/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** @description The tenant's active dishes. */
        get: operations["v1_menu_list"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/orders/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * @description The caller's orders, newest first (a diner's own; a merchant key's, all of them), 20
         *     a page; ``?status=`` filters. Pages follow each other by cursor (the answer's ``next``
         *     and ``previous`` links), so orders placed or moved while a client scrolls neither
         *     repeat nor skip an order on the pages it reads next.
         */
        get: operations["v1_orders_list"];
        put?: never;
        /** @description Place an order. Prices come from the menu; stock and coupon are taken atomically. */
        post: operations["v1_orders_create"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/orders/{order_id}/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["v1_orders_detail"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/orders/{order_id}/cancel/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Cancel: unpaid orders end CANCELLED, paid ones go to CANCELLING (refund). */
        post: operations["v1_orders_cancel"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/orders/{order_id}/pay/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * @description Start paying: CREATED -> PAYING with a new Payment; once every payment was
         *     declined, pay again with a new Idempotency-Key (the order stays PAYING). An order
         *     whose total is 0.00 needs no payment: it moves CREATED -> PAID at once, ``payment``
         *     null.
         */
        post: operations["v1_orders_pay"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/orders/{order_id}/transition/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Merchant-side move (ACCEPTED, PREPARING, READY, DELIVERING, COMPLETED, CANCELLED). */
        post: operations["v1_orders_transition"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/v1/payments/callback/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * @description A provider event (payment succeeded or failed), signed with the provider's secret.
         *
         *     Every authentic event answers 200, duplicates and late events included, so the
         *     provider stops retrying; forged or stale signatures 401/400, nothing written.
         */
        post: operations["payment_callback"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /** @enum {unknown} */
        BlankEnum: "";
        CheckTokensIn: {
            tokens: string[];
        };
        CheckTokensOut: {
            results: components["schemas"]["TokenCheckResult"][];
        };
        /**
         * @description * `amount_mismatch` - Amount or currency differs from the order
         *     * `paid_after_cancel` - Captured after the order was cancelled
         *     * `paid_twice` - Captured for an order another payment had already paid
         *     * `unexpected_state` - Success for an order not awaiting payment
         *     * `event_id_reused` - Event id received before, with another event
         *     * `paid_after_offboarding` - Captured after the restaurant left the platform
         * @enum {string}
         */
        ConflictEnum: "amount_mismatch" | "paid_after_cancel" | "paid_twice" | "unexpected_state" | "event_id_reused" | "paid_after_offboarding";
        Contact: {
            /** @description Personal data: null in a replay whose Idempotency-Redacted header names it (GET the order for the value). */
            phone: string | null;
            /** @description Personal data: null in a replay whose Idempotency-Redacted header names it (GET the order for the value). */
            address: string | null;
        };
        /** @description How to reach the diner: kept on the order, never in a stored reply (redacted). */
        ContactIn: {
            /** @default  */
            phone?: string;
            /** @default  */
            address?: string;
        };
        DinerSessionOut: {
            /** @description Send as 'Authorization: Bearer <token>' */
            token: string;
            diner_id: string;
            /** Format: date-time */
            expires_at: string;
        };
        Dish: {
            readonly id: number;
            readonly name: string;
            readonly description: string;
            /** Format: decimal */
            readonly price: string;
            readonly stock: number;
            readonly available: boolean;
        };
        IssueTokensIn: {
            /** @default 1 */
            count?: number | null;
        };
        IssuedTokensOut: {
            tokens: string[];
            /** Format: date-time */
            expires_at: string;
            ttl_seconds: number;
        };
        ItemIn: {
            /** Format: int64 */
            dish_id: number;
            /** @description Portions; more than 100 of one dish per order answers 400 QUANTITY_INVALID */
            quantity: number;
        };
        /** @enum {unknown} */
        NullEnum: null;
        OpenSessionIn: {
            /** @description Merchant keys only: the diner your backend signed in (1-64 of A-Za-z0-9_.:@-; not starting with 'guest_' or 'erased-'). */
            diner_id?: string | null;
        };
        Order: {
            readonly id: string;
            /** @description Short number for people, per restaurant and business day (1, 2, ...) */
            readonly number: number | null;
            /** @description e.g. "#0427" */
            readonly number_label: string;
            /**
             * Format: date
             * @description The restaurant's calendar day of the number
             */
            readonly business_day: string | null;
            readonly status: components["schemas"]["OrderStatusEnum"];
            readonly diner_id: string;
            readonly payment_method: components["schemas"]["PaymentMethodEnum"];
            readonly coupon_code: string | null;
            /** Format: decimal */
            readonly subtotal: string;
            /** Format: decimal */
            readonly discount: string;
            /** Format: decimal */
            readonly total: string;
            readonly currency: string;
            readonly note: string;
            readonly contact: components["schemas"]["Contact"];
            readonly lines: components["schemas"]["OrderLine"][];
            readonly payment: components["schemas"]["Payment"] | (null);
            /** Format: date-time */
            readonly created_at: string;
            /** Format: date-time */
            readonly updated_at: string;
        };
        OrderDetail: {
            readonly id: string;
            /** @description Short number for people, per restaurant and business day (1, 2, ...) */
            readonly number: number | null;
            /** @description e.g. "#0427" */
            readonly number_label: string;
            /**
             * Format: date
             * @description The restaurant's calendar day of the number
             */
            readonly business_day: string | null;
            readonly status: components["schemas"]["OrderStatusEnum"];
            readonly diner_id: string;
            readonly payment_method: components["schemas"]["PaymentMethodEnum"];
            readonly coupon_code: string | null;
            /** Format: decimal */
            readonly subtotal: string;
            /** Format: decimal */
            readonly discount: string;
            /** Format: decimal */
            readonly total: string;
            readonly currency: string;
            readonly note: string;
            readonly contact: components["schemas"]["Contact"];
            readonly lines: components["schemas"]["OrderLine"][];
            readonly payment: components["schemas"]["Payment"] | (null);
            /** Format: date-time */
            readonly created_at: string;
            /** Format: date-time */
            readonly updated_at: string;
            readonly transitions: components["schemas"]["Transition"][];
        };
        OrderLine: {
            readonly dish_id: number;
            readonly dish_name: string;
            /** Format: decimal */
            readonly unit_price: string;
            readonly quantity: number;
            /** Format: decimal */
            readonly line_total: string;
        };
        /**
         * @description * `CREATED` - Created
         *     * `PAYING` - Paying
         *     * `PAID` - Paid
         *     * `ACCEPTED` - Accepted
         *     * `PREPARING` - Preparing
         *     * `READY` - Ready
         *     * `DELIVERING` - Delivering
         *     * `COMPLETED` - Completed
         *     * `CANCELLING` - Cancelling
         *     * `CANCELLED` - Cancelled
         * @enum {string}
         */
        OrderStatusEnum: "CREATED" | "PAYING" | "PAID" | "ACCEPTED" | "PREPARING" | "READY" | "DELIVERING" | "COMPLETED" | "CANCELLING" | "CANCELLED";
        /**
         * @description The page envelope of ``GET /api/v1/orders/``: cursor pagination (the links carry the
         *     cursor), with the list's ``count`` that its page-number answer had.
         */
        PaginatedOrders: {
            /** @description Every order of the list, all pages, when this page was read, counted up to 10,000: a list of more answers 10,000. */
            count: number;
            /**
             * Format: uri
             * @description The older orders' page; null: none older.
             */
            next: string | null;
            /**
             * Format: uri
             * @description The newer orders' page; null on the first page, and on a page read backwards that reached the newest orders.
             */
            previous: string | null;
            results: components["schemas"]["Order"][];
        };
        Payment: {
            readonly provider: string;
            /** @description Shown to merchant keys only. */
            provider_txn_id?: string;
            readonly method: components["schemas"]["PaymentMethodEnum"];
            /** Format: decimal */
            readonly amount: string;
            readonly currency: string;
            readonly status: components["schemas"]["PaymentStatusEnum"];
        };
        PaymentCallbackResult: {
            result: components["schemas"]["ResultEnum"];
            order_id: string;
            order_status: components["schemas"]["OrderStatusEnum"];
            conflict: (components["schemas"]["ConflictEnum"] | components["schemas"]["NullEnum"]) | null;
        };
        /**
         * @description * `card` - card
         *     * `wallet` - wallet
         *     * `cash` - cash
         * @enum {string}
         */
        PaymentMethodEnum: "card" | "wallet" | "cash";
        /**
         * @description * `pending` - Pending
         *     * `succeeded` - Succeeded
         *     * `failed` - Failed
         *     * `voided` - Voided
         *     * `refunded` - Refunded
         * @enum {string}
         */
        PaymentStatusEnum: "pending" | "succeeded" | "failed" | "voided" | "refunded";
        PlaceOrderIn: {
            items: components["schemas"]["ItemIn"][];
            payment_method: components["schemas"]["PaymentMethodEnum"];
            /** @description Read in capitals, as merchants' codes are written (welcome10 is WELCOME10). */
            coupon_code?: string | null;
            /** @default  */
            note?: string | null;
            contact?: components["schemas"]["ContactIn"] | (null);
        };
        /** @description RFC 9457 problem details with a machine-readable ``code``. */
        Problem: {
            code: components["schemas"]["ProblemCode"];
            detail: string;
            status: number;
            /** @description Field errors, on invalid input (VALIDATION_ERROR) */
            errors?: components["schemas"]["FieldErrors"];
            /** @description INSUFFICIENT_STOCK, QUANTITY_INVALID: the dish refused */
            dish_id?: number;
            /** @description DISH_NOT_FOUND, DISH_UNAVAILABLE: the dishes refused */
            dish_ids?: number[];
            /** @description The bound that refused: REQUEST_TOO_LARGE, bytes; IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED, tokens outstanding; ORDER_TOTAL_TOO_LARGE, the largest amount, a decimal string */
            limit?: number | string;
            /**
             * @description IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED: whose quota refused, the tenant's, the caller's share, or the guests' share of the tenant's (tenant_share)
             * @enum {string}
             */
            scope?: "tenant" | "principal" | "tenant_share";
            /** @description ORDER_ALREADY_PLACED: the order this key placed; ORDER_STATUS_CONFLICT: the order refused */
            order_id?: string;
            /** @description ORDER_STATUS_CONFLICT: the order's status now */
            order_status?: components["schemas"]["OrderStatusEnum"];
            /** @description ORDER_STATUS_CONFLICT: the moves the order allows now, and who may make each */
            allowed_moves?: {
                to: components["schemas"]["OrderStatusEnum"];
                by: ("diner" | "merchant" | "provider" | "saga")[];
            }[];
        };
        /**
         * @description * `applied` - applied
         *     * `duplicate` - duplicate
         *     * `ignored` - ignored
         *     * `conflict` - conflict
         * @enum {string}
         */
        ResultEnum: "applied" | "duplicate" | "ignored" | "conflict";
        RevokedSessions: {
            revoked: number;
        };
        /**
         * @description * `ACCEPTED` - ACCEPTED
         *     * `PREPARING` - PREPARING
         *     * `READY` - READY
         *     * `DELIVERING` - DELIVERING
         *     * `COMPLETED` - COMPLETED
         *     * `CANCELLED` - CANCELLED
         * @enum {string}
         */
        ToEnum: "ACCEPTED" | "PREPARING" | "READY" | "DELIVERING" | "COMPLETED" | "CANCELLED";
        TokenCheckResult: {
            token: string;
            /** @description unused: issued to this caller, not used yet; used: consumed by an operation; unknown: Redis does not hold it (expired unused, never issued, or lost with Redis's data: it may have been used); invalid: malformed, forged, or another caller's */
            status: components["schemas"]["TokenCheckResultStatusEnum"];
        };
        /** @enum {string} */
        TokenCheckResultStatusEnum: "unused" | "used" | "unknown" | "invalid";
        Transition: {
            from_status: components["schemas"]["OrderStatusEnum"] | components["schemas"]["BlankEnum"];
            readonly to_status: components["schemas"]["OrderStatusEnum"];
            /** @description Shown to merchant keys only. */
            actor?: string;
            /** Format: date-time */
            readonly at: string;
        };
        TransitionIn: {
            to: components["schemas"]["ToEnum"];
        };
        /**
         * @description The machine-readable code of an error (README, API errors)
         * @enum {string}
         */
        ProblemCode: "API_KEY_INVALID" | "API_KEY_MISSING" | "BAD_REQUEST" | "COUPON_EXHAUSTED" | "COUPON_INVALID" | "CURSOR_INVALID" | "DATABASE_UNAVAILABLE" | "DISH_NOT_FOUND" | "DISH_UNAVAILABLE" | "HTTPS_REQUIRED" | "IDEMPOTENCY_KEY_INVALID" | "IDEMPOTENCY_KEY_MISSING" | "IDEMPOTENCY_KEY_REUSED" | "IDEMPOTENCY_PAYLOAD_INVALID" | "IDEMPOTENCY_REQUEST_IN_PROGRESS" | "IDEMPOTENCY_TOKENS_UNAVAILABLE" | "IDEMPOTENCY_TOKEN_INVALID" | "IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED" | "IDEMPOTENCY_TOKEN_UNKNOWN" | "IDEMPOTENCY_TOKEN_USED" | "INSUFFICIENT_STOCK" | "INVALID_JSON" | "LENGTH_REQUIRED" | "METHOD_NOT_ALLOWED" | "NOT_ACCEPTABLE" | "NOT_FOUND" | "ORDER_ALREADY_PLACED" | "ORDER_ID_UNAVAILABLE" | "ORDER_NOT_FOUND" | "ORDER_STATUS_CONFLICT" | "ORDER_TOTAL_TOO_LARGE" | "PAYMENT_CALLBACK_INVALID" | "PAYMENT_NOT_FOUND" | "PAYMENT_PROVIDER_UNKNOWN" | "PAYMENT_SIGNATURE_INVALID" | "PAYMENT_TIMESTAMP_INVALID" | "PAYMENT_TIMESTAMP_STALE" | "PERMISSION_DENIED" | "QUANTITY_INVALID" | "RATE_LIMITED" | "REQUEST_TOO_LARGE" | "SERVER_ERROR" | "SESSION_EXPIRED" | "SESSION_INVALID" | "SESSION_REVOKED" | "TENANT_SUSPENDED" | "UNSUPPORTED_MEDIA_TYPE" | "VALIDATION_ERROR";
        /** @description VALIDATION_ERROR: each refused field (or list element, by index) with its messages, or the errors of the object or list it holds */
        FieldErrors: {
            [key: string]: string[] | components["schemas"]["FieldErrors"];
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    diner_sessions_open: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["OpenSessionIn"];
            };
        };
        responses: {
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["DinerSessionOut"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Unsupported media type */
            415: {
                headers: {
                    /** @description On a body sent in a content coding: the one the API reads (send the body uncompressed). */
                    "Accept-Encoding"?: "identity";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description RATE_LIMITED (Retry-After): too many guest sessions opened, per client address (DINER_SESSION_OPEN_RATE_PER_IP, 20 a minute by default) or per publishable key (DINER_SESSION_OPEN_RATE_PER_KEY, 600); a merchant key's sign-in, by that key's write rate limit */
            429: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After): e.g. the database cannot be reached (DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    diner_sessions_end: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description No response body */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large (REQUEST_TOO_LARGE) */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description The body is not JSON (UNSUPPORTED_MEDIA_TYPE): request bodies are JSON only */
            415: {
                headers: {
                    /** @description On a body sent in a content coding: the one the API reads (send the body uncompressed). */
                    "Accept-Encoding"?: "identity";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After): e.g. the database cannot be reached (DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    diner_sessions_refresh: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["DinerSessionOut"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large (REQUEST_TOO_LARGE) */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description The body is not JSON (UNSUPPORTED_MEDIA_TYPE): request bodies are JSON only */
            415: {
                headers: {
                    /** @description On a body sent in a content coding: the one the API reads (send the body uncompressed). */
                    "Accept-Encoding"?: "identity";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Write rate limit reached (Retry-After) */
            429: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After): e.g. the database cannot be reached (DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    diner_sessions_revoke_diner: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                diner_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["RevokedSessions"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Not found for this caller */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large (REQUEST_TOO_LARGE) */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description The body is not JSON (UNSUPPORTED_MEDIA_TYPE): request bodies are JSON only */
            415: {
                headers: {
                    /** @description On a body sent in a content coding: the one the API reads (send the body uncompressed). */
                    "Accept-Encoding"?: "identity";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Write rate limit reached (Retry-After) */
            429: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After): e.g. the database cannot be reached (DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    v1_idempotency_tokens_create: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["IssueTokensIn"];
            };
        };
        responses: {
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["IssuedTokensOut"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Unsupported media type */
            415: {
                headers: {
                    /** @description On a body sent in a content coding: the one the API reads (send the body uncompressed). */
                    "Accept-Encoding"?: "identity";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description RATE_LIMITED: the write rate limit (Retry-After: the window's end); IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED: the quota of outstanding tokens (`limit`, `scope`; Retry-After: until the oldest of them expire) */
            429: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After) */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    v1_idempotency_tokens_check: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["CheckTokensIn"];
            };
        };
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["CheckTokensOut"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Unsupported media type */
            415: {
                headers: {
                    /** @description On a body sent in a content coding: the one the API reads (send the body uncompressed). */
                    "Accept-Encoding"?: "identity";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After) */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    v1_menu_list: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Dish"][];
                };
            };
            /** @description Refused at the HTTP level before any API code ran (BAD_REQUEST): e.g. a Host header this site does not serve */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large (REQUEST_TOO_LARGE) */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After): e.g. the database cannot be reached (DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    v1_orders_list: {
        parameters: {
            query?: {
                /** @description Where the page starts: the cursor of an answer's next or previous link (opaque); leave it out for the newest orders. One not in the form those links give answers 400 CURSOR_INVALID; it names a place in the caller's own list, never a permission. */
                cursor?: string;
                /** @description Only orders in this status */
                status?: "ACCEPTED" | "CANCELLED" | "CANCELLING" | "COMPLETED" | "CREATED" | "DELIVERING" | "PAID" | "PAYING" | "PREPARING" | "READY";
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["PaginatedOrders"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Not found for this caller */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large (REQUEST_TOO_LARGE) */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After): e.g. the database cannot be reached (DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    v1_orders_create: {
        parameters: {
            query?: never;
            header: {
                /** @description 1-255 printable ASCII characters (no comma, not starting with auto:); reuse it for every retry of the operation. */
                "Idempotency-Key": string;
            };
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["PlaceOrderIn"];
            };
        };
        responses: {
            /** @description The order, placed by this request (MISS) or by the first request with this key (HIT, the same bytes). */
            201: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    /** @description On a replay that left personal fields null: their JSON paths, comma-separated. */
                    "Idempotency-Redacted"?: string;
                    /** @description The order's URL (on 409 ORDER_ALREADY_PLACED, the order the key placed). */
                    Location?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["OrderDetail"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Not found for this caller */
            404: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Conflict: the order's state, stock, or the same key still in progress (see `code`) */
            409: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    /** @description On IDEMPOTENCY_REQUEST_IN_PROGRESS: seconds to wait before sending again. */
                    "Retry-After"?: number;
                    /** @description The order's URL (on 409 ORDER_ALREADY_PLACED, the order the key placed). */
                    Location?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Unsupported media type */
            415: {
                headers: {
                    /** @description On a body sent in a content coding: the one the API reads (send the body uncompressed). */
                    "Accept-Encoding"?: "identity";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Idempotency key reused with another payload, or a business refusal */
            422: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Write rate limit reached (Retry-After) */
            429: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After) */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    v1_orders_detail: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                order_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["OrderDetail"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Not found for this caller */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large (REQUEST_TOO_LARGE) */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After): e.g. the database cannot be reached (DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    v1_orders_cancel: {
        parameters: {
            query?: never;
            header?: {
                /** @description Optional here: without one, identical requests within 60 s replay the first. */
                "Idempotency-Key"?: string;
            };
            path: {
                order_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    /** @description On a replay that left personal fields null: their JSON paths, comma-separated. */
                    "Idempotency-Redacted"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["OrderDetail"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Not found for this caller */
            404: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Conflict: the order's state, stock, or the same key still in progress (see `code`) */
            409: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    /** @description On IDEMPOTENCY_REQUEST_IN_PROGRESS: seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Unsupported media type */
            415: {
                headers: {
                    /** @description On a body sent in a content coding: the one the API reads (send the body uncompressed). */
                    "Accept-Encoding"?: "identity";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Idempotency key reused with another payload, or a business refusal */
            422: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Write rate limit reached (Retry-After) */
            429: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After): e.g. the database cannot be reached (DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    v1_orders_pay: {
        parameters: {
            query?: never;
            header?: {
                /** @description Optional here: without one, identical requests within 60 s replay the first. */
                "Idempotency-Key"?: string;
            };
            path: {
                order_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    /** @description On a replay that left personal fields null: their JSON paths, comma-separated. */
                    "Idempotency-Redacted"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["OrderDetail"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Not found for this caller */
            404: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Conflict: the order's state, stock, or the same key still in progress (see `code`) */
            409: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    /** @description On IDEMPOTENCY_REQUEST_IN_PROGRESS: seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Unsupported media type */
            415: {
                headers: {
                    /** @description On a body sent in a content coding: the one the API reads (send the body uncompressed). */
                    "Accept-Encoding"?: "identity";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Idempotency key reused with another payload, or a business refusal */
            422: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Write rate limit reached (Retry-After) */
            429: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After): e.g. the database cannot be reached (DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    v1_orders_transition: {
        parameters: {
            query?: never;
            header?: {
                /** @description Optional here: without one, identical requests within 60 s replay the first. */
                "Idempotency-Key"?: string;
            };
            path: {
                order_id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["TransitionIn"];
            };
        };
        responses: {
            200: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    /** @description On a replay that left personal fields null: their JSON paths, comma-separated. */
                    "Idempotency-Redacted"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["OrderDetail"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Tenant suspended, or not allowed for this API client (see `code`) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Not found for this caller */
            404: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Conflict: the order's state, stock, or the same key still in progress (see `code`) */
            409: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    /** @description On IDEMPOTENCY_REQUEST_IN_PROGRESS: seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Unsupported media type */
            415: {
                headers: {
                    /** @description On a body sent in a content coding: the one the API reads (send the body uncompressed). */
                    "Accept-Encoding"?: "identity";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Idempotency key reused with another payload, or a business refusal */
            422: {
                headers: {
                    /** @description MISS: this request ran the operation; HIT: the first answer to this key, replayed byte for byte (an error answer too); IN_PROGRESS (409): the first request with this key is still running; REUSED (422): the key was sent with another payload. A success answer without it is not the API's. */
                    "X-Idempotent-Result"?: "MISS" | "HIT" | "IN_PROGRESS" | "REUSED";
                    /** @description On a replay only. */
                    "Idempotent-Replayed"?: "true";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Write rate limit reached (Retry-After) */
            429: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After): e.g. the database cannot be reached (DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    payment_callback: {
        parameters: {
            query?: never;
            header: {
                "X-Provider"?: "simulated";
                "X-Provider-Signature": string;
                "X-Provider-Timestamp": number;
            };
            path?: never;
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": {
                    [key: string]: unknown;
                };
            };
        };
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["PaymentCallbackResult"];
                };
            };
            /** @description Invalid input, key or body (see `code`) */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Credentials missing, malformed, unknown, expired or revoked (see `code`) */
            401: {
                headers: {
                    /** @description The authentication schemes this endpoint takes, e.g. `Api-Key, Bearer`. */
                    "WWW-Authenticate": string;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Refused over plain HTTP (HTTPS_REQUIRED): the API answers over HTTPS only */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Not found for this caller */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No media type the API answers in is acceptable (it answers JSON) */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description A chunked body sent to a server that reads bodies by their Content-Length only (LENGTH_REQUIRED): Django's development server, never gunicorn */
            411: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Request body too large */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Unsupported media type */
            415: {
                headers: {
                    /** @description On a body sent in a content coding: the one the API reads (send the body uncompressed). */
                    "Accept-Encoding"?: "identity";
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Temporarily unavailable (Retry-After): e.g. the database cannot be reached (DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key */
            503: {
                headers: {
                    /** @description Seconds to wait before sending again. */
                    "Retry-After"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
}
