-- Order lifecycle.
CREATE TYPE order_status AS ENUM ('pending', 'paid', 'shipped');
