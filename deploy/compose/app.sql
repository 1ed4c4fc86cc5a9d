-- The application of the compose demo: a table of its own, in public, that
-- syncer exports as it is (deploy/compose/syncer.yaml). PostgreSQL runs it
-- once, when its data directory is created.
CREATE TYPE order_status AS ENUM ('new', 'paid', 'shipped');
CREATE TABLE orders (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status     order_status   NOT NULL DEFAULT 'new',
    total      numeric(12, 2) NOT NULL,
    updated_at timestamptz    NOT NULL DEFAULT now()
);
