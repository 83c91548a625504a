module cliffwatch/bench/arrivals_server

go 1.22
