from trainserve.cli import main

main()
